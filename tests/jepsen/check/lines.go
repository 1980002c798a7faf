package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// WriteLines writes items to w as JSON lines, one item a line.
func WriteLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

// ReadLines reads JSON lines written by WriteLines, or by a process that
// writes one json.Encoder.Encode per record. Empty lines are skipped. A
// last line without its newline that does not parse — the record a
// process was writing when it was killed — is dropped, and torn says so;
// any other line that does not parse is an error naming its line number.
func ReadLines[T any](r io.Reader) (items []T, torn bool, err error) {
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return items, false, fmt.Errorf("line %d: %w", n, err)
		}
		complete := err == nil
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var it T
			if jerr := json.Unmarshal(trimmed, &it); jerr != nil {
				if !complete {
					return items, true, nil
				}
				return items, false, fmt.Errorf("line %d: %w", n, jerr)
			}
			items = append(items, it)
		}
		if !complete {
			return items, false, nil
		}
	}
}
