package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
)

// startChild starts cmd, a benchmark's helper process, with env added to
// this process's environment and its standard error on stderr. It returns
// the child's standard input (closing it tells the child to finish) and
// standard output (JSON events, one per line).
func startChild(cmd *exec.Cmd, env []string, stderr io.Writer) (io.WriteCloser, io.Reader, error) {
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return in, out, nil
}

// readEvents decodes the JSON events a child prints, one per line, and
// hands each to emit until the output ends; it returns the scanner's
// error. A line that does not decode is logged and skipped.
func readEvents[T any](out io.Reader, log *slog.Logger, who string, emit func(T)) error {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ev T
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			log.Warn("unreadable line from "+who, "line", sc.Text())
			continue
		}
		emit(ev)
	}
	return sc.Err()
}
