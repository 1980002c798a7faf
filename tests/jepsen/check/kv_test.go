package check

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

// kvo builds an operation completed OK by client cl over [inv, comp].
func kvo(cl int, inv, comp int64, kind KVKind, key string) KVOp {
	return KVOp{Client: cl, Kind: kind, Key: key, Invoke: inv, Complete: comp, Outcome: OK}
}

func put(cl int, inv, comp int64, key, v string) KVOp {
	op := kvo(cl, inv, comp, Put, key)
	op.Value = v
	return op
}

func get(cl int, inv, comp int64, key, v string) KVOp {
	op := kvo(cl, inv, comp, Get, key)
	op.Read, op.Found = v, v != ""
	return op
}

func cas(cl int, inv, comp int64, key string, expect *string, v string, swapped bool) KVOp {
	op := kvo(cl, inv, comp, CAS, key)
	op.Expect, op.Value, op.Swapped = expect, v, swapped
	return op
}

func del(cl int, inv, comp int64, key string, found bool) KVOp {
	op := kvo(cl, inv, comp, Delete, key)
	op.Found = found
	return op
}

func with(op KVOp, o Outcome) KVOp {
	op.Outcome = o
	if o == Unknown {
		op.Complete = 0 // never recorded
	}
	return op
}

func TestCheckKV(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []KVOp
		want Property // "" for a correct history
	}{
		{name: "sequential", ops: []KVOp{
			put(0, 0, 1, "x", "a"), get(0, 2, 3, "x", "a"),
			cas(0, 4, 5, "x", ptr("a"), "b", true), cas(0, 6, 7, "x", ptr("a"), "c", false),
			del(0, 8, 9, "x", true), get(0, 10, 11, "x", ""), cas(0, 12, 13, "x", nil, "d", true),
		}},
		{name: "concurrent write: either answer", ops: []KVOp{
			put(0, 0, 10, "x", "a"), get(1, 1, 2, "x", ""), get(2, 3, 4, "x", "a"),
		}},
		{name: "unknown write seen later took effect", ops: []KVOp{
			with(put(0, 0, 1, "x", "a"), Unknown), get(1, 5, 6, "x", "a"),
		}},
		{name: "unknown write never seen", ops: []KVOp{
			with(put(0, 0, 1, "x", "a"), Unknown), get(1, 5, 6, "x", ""), get(1, 7, 8, "x", ""),
		}},
		{name: "unknown cas and delete", ops: []KVOp{
			put(0, 0, 1, "x", "a"), with(cas(0, 2, 3, "x", ptr("a"), "b", false), Unknown),
			with(del(1, 2, 3, "x", false), Unknown), get(2, 10, 11, "x", "b"),
		}},
		{name: "failed operations are left out", ops: []KVOp{
			put(0, 0, 1, "x", "a"), with(put(0, 2, 3, "x", "b"), Fail), with(get(1, 4, 5, "x", "zzz"), Unknown), get(1, 6, 7, "x", "a"),
		}},
		{name: "keys are independent", ops: []KVOp{
			put(0, 0, 1, "x", "a"), get(0, 2, 3, "y", ""), get(0, 4, 5, "x", "a"),
		}},
		{name: "stale read", want: Linearizable, ops: []KVOp{
			put(0, 0, 1, "x", "a"), put(0, 2, 3, "x", "b"), get(1, 4, 5, "x", "a"),
		}},
		{name: "lost acknowledged write", want: Linearizable, ops: []KVOp{
			put(0, 0, 1, "x", "a"), get(1, 2, 3, "x", ""),
		}},
		{name: "reads go back in time", want: Linearizable, ops: []KVOp{
			put(0, 0, 10, "x", "a"), get(1, 1, 2, "x", "a"), get(2, 3, 4, "x", ""),
		}},
		{name: "cas swaps on the wrong value", want: Linearizable, ops: []KVOp{
			put(0, 0, 1, "x", "a"), cas(0, 2, 3, "x", ptr("z"), "b", true),
		}},
		{name: "unknown write takes effect before its invocation", want: Linearizable, ops: []KVOp{
			get(1, 0, 1, "x", "a"), with(put(0, 2, 3, "x", "a"), Unknown),
		}},
		{name: "failed write seen", want: Linearizable, ops: []KVOp{
			with(put(0, 0, 1, "x", "a"), Fail), get(1, 2, 3, "x", "a"),
		}},
		{name: "unknown kind", want: Wellformed, ops: []KVOp{{Kind: "incr", Key: "x", Outcome: OK}}},
		{name: "unknown outcome", want: Wellformed, ops: []KVOp{{Kind: Get, Key: "x", Outcome: "maybe"}}},
		{name: "completion before invocation", want: Wellformed, ops: []KVOp{put(0, 5, 4, "x", "a")}},
		{name: "request id used twice", want: Wellformed, ops: []KVOp{
			{RequestID: "r1", Kind: Put, Key: "x", Value: "a", Outcome: OK, Invoke: 0, Complete: 1},
			{RequestID: "r1", Kind: Put, Key: "x", Value: "a", Outcome: OK, Invoke: 2, Complete: 3},
		}},
		{name: "empty history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckKV(tc.ops, KVOptions{})
			expect(t, r, tc.want)
		})
	}
}

// expect fails the test unless r is OK (want "") or holds a violation of
// want, and only of want.
func expect(t *testing.T, r Result, want Property) {
	t.Helper()
	expectOnly(t, r, want)
}

// expectOnly fails the test unless r is OK (want "") or holds a
// violation of want, and of no property but want and also.
func expectOnly(t *testing.T, r Result, want Property, also ...Property) {
	t.Helper()
	switch {
	case want == "" && !r.OK:
		t.Fatalf("want ok, got %v", r)
	case want == "" && len(r.Violations) > 0:
		t.Fatalf("OK with violations: %v", r)
	case want != "" && r.OK:
		t.Fatalf("want a violation of %q, got ok", want)
	case want != "" && !r.Has(want):
		t.Fatalf("want a violation of %q, got %v", want, r)
	}
	for _, v := range r.Violations {
		if v.Property != want && !slices.Contains(also, v.Property) {
			t.Errorf("unexpected violation (want only %q and %q): %v", want, also, v)
		}
		if v.Where == "" || v.What == "" {
			t.Errorf("violation without where or what: %+v", v)
		}
	}
}

// TestCheckKVReport: a failed check writes porcupine's visualisation and
// the history, which reads back as it was.
func TestCheckKVReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	ops := []KVOp{put(0, 0, 1, "x", "a"), put(0, 2, 3, "x", "b"), get(1, 4, 5, "x", "a"), get(1, 6, 7, "y", "")}
	r := CheckKV(ops, KVOptions{ReportDir: dir})
	if r.OK || r.ReportError != "" {
		t.Fatalf("got %v", r)
	}
	want := []string{filepath.Join(dir, KVVisualisation), filepath.Join(dir, KVHistory)}
	if strings.Join(r.Report, " ") != strings.Join(want, " ") {
		t.Fatalf("report files %v, want %v", r.Report, want)
	}
	html, err := os.ReadFile(want[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte(`put(x, \"b\")`)) {
		t.Errorf("the visualisation does not describe the operations")
	}
	f, err := os.Open(want[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, torn, err := ReadLines[KVOp](f)
	if err != nil || torn || len(back) != len(ops) || back[2] != ops[2] {
		t.Fatalf("history read back: %v (torn %v, err %v), want %v", back, torn, err, ops)
	}

	// A correct history writes nothing.
	dir2 := filepath.Join(t.TempDir(), "none")
	if r := CheckKV(ops[:2], KVOptions{ReportDir: dir2}); !r.OK || len(r.Report) > 0 {
		t.Fatalf("got %v", r)
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Fatalf("a correct history created the report directory: %v", err)
	}
}

func TestReadLines(t *testing.T) {
	ops := []KVOp{put(0, 0, 1, "x", "a"), cas(1, 2, 3, "x", ptr("a"), "b", true)}
	var buf bytes.Buffer
	if err := WriteLines(&buf, ops); err != nil {
		t.Fatal(err)
	}
	full := buf.String()
	for _, tc := range []struct {
		name    string
		in      string
		n       int
		torn    bool
		wantErr string
	}{
		{name: "complete", in: full, n: 2},
		{name: "empty lines", in: "\n" + strings.ReplaceAll(full, "\n", "\n\n"), n: 2},
		{name: "last line without newline", in: strings.TrimSuffix(full, "\n"), n: 2},
		{name: "torn last line", in: full + `{"client":3,"ki`, n: 2, torn: true},
		{name: "garbage in the middle", in: `{"client":3,"ki` + "\n" + full, wantErr: "line 1"},
		{name: "nothing", in: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, torn, err := ReadLines[KVOp](strings.NewReader(tc.in))
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr == "" && (len(got) != tc.n || torn != tc.torn):
				t.Fatalf("got %d items (torn %v), want %d (torn %v)", len(got), torn, tc.n, tc.torn)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], ops[i]) {
					t.Errorf("item %d: %+v, want %+v", i, got[i], ops[i])
				}
			}
		})
	}
}
