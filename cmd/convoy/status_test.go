package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestStatusReportPrint checks the table of "convoy status": a member
// that serves, one that does not answer, and the suspicions under the
// table.
func TestStatusReportPrint(t *testing.T) {
	r := statusReport{Prefix: "/convoy/", Epoch: 3, Start: 7, Members: []statusMember{
		{ID: 1, InView: true, Incarnation: 11, Addr: "10.0.0.1:7000", HTTP: "http://10.0.0.1:7101", PID: 100,
			Status: &memberStatus{ID: 1, Epoch: 3, Serving: true, Applied: 9}},
		{ID: 2, InView: true, Incarnation: 12, Addr: "10.0.0.2:7000", HTTP: "http://10.0.0.2:7101",
			SuspectedBy: map[uint64]string{3: "stalled", 1: "silent"}, Error: "unreachable: connect: connection refused"},
	}}
	var b strings.Builder
	if err := r.print(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"prefix /convoy/: view 3, 2 members, starts after delivery 7\n",
		"http://10.0.0.1:7101",
		"no: unreachable: connect: connection refused",
		"member 2 is suspected by 1 (silent), 3 (stalled)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "member 1 is suspected") {
		t.Errorf("the table says member 1 is suspected:\n%s", out)
	}
}

// TestDecodeHTTPRecords: records any process with access to the prefix
// may have written; the usable ones are kept, and each other one is
// described and left out.
func TestDecodeHTTPRecords(t *testing.T) {
	const prefix = "/convoy/"
	kv := func(key, value string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(httpKeys(prefix) + key), Value: []byte(value)}
	}
	for _, tc := range []struct {
		name    string
		kv      *mvccpb.KeyValue
		problem string // "" if the record is kept
	}{
		{"http", kv("1", `{"id":1,"app":"kv","url":"http://127.0.0.1:7101","pid":10}`), ""},
		{"https", kv("2", `{"id":2,"app":"log","url":"https://node-2.example:7101"}`), ""},
		{"not JSON", kv("3", `{"id":3,`), "unexpected end of JSON input"},
		{"another member's", kv("4", `{"id":5,"url":"http://127.0.0.1:7105"}`), "does not name member 5"},
		{"key not an id", kv("x", `{"id":0,"url":"http://127.0.0.1:7105"}`), "does not name member 0"},
		{"no scheme", kv("6", `{"id":6,"url":"127.0.0.1:7106"}`), "URL"},
		{"another scheme", kv("7", `{"id":7,"url":"file:///etc/passwd"}`), "not an http or https URL"},
		{"no host", kv("8", `{"id":8,"url":"http:///status"}`), "not an http or https URL"},
		{"user info", kv("9", `{"id":9,"url":"http://me:pw@127.0.0.1:7109"}`), "not an http or https URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := kv("100", `{"id":100,"url":"http://127.0.0.1:7100"}`)
			recs, problems := decodeHTTPRecords([]*mvccpb.KeyValue{tc.kv, good}, prefix)
			if _, ok := recs[100]; !ok {
				t.Errorf("the good record is left out: %v %v", recs, problems)
			}
			switch {
			case tc.problem == "" && (len(problems) != 0 || len(recs) != 2):
				t.Errorf("kept %d records, problems %q; want both kept", len(recs), problems)
			case tc.problem != "" && (len(problems) != 1 || len(recs) != 1 || !strings.Contains(problems[0], tc.problem)):
				t.Errorf("kept %d records, problems %q; want one problem with %q", len(recs), problems, tc.problem)
			}
		})
	}
}

// TestAuthorize: the bearer token goes over TLS or to this machine only.
func TestAuthorize(t *testing.T) {
	for _, tc := range []struct {
		url, token string
		sent       bool // the token is in the request
		refused    bool
	}{
		{"http://10.0.0.1:7101/status", "", false, false},
		{"https://10.0.0.1:7101/status", "secret", true, false},
		{"https://node.example/status", "secret", true, false},
		{"http://127.0.0.1:7101/status", "secret", true, false},
		{"http://127.9.9.9:7101/status", "secret", true, false},
		{"http://[::1]:7101/status", "secret", true, false},
		{"http://localhost:7101/status", "secret", true, false},
		{"http://10.0.0.1:7101/status", "secret", false, true},
		{"http://node.example/status", "secret", false, true},
		{"http://localhost.example/status", "secret", false, true},
		{"http://127.0.0.1.example/status", "secret", false, true},
	} {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = apiClient{token: tc.token}.authorize(req)
		if got := req.Header.Get("Authorization") != ""; got != tc.sent {
			t.Errorf("%s: token sent %v, want %v", tc.url, got, tc.sent)
		}
		if refused := errors.Is(err, errTokenInPlainText); refused != tc.refused || err != nil && !refused {
			t.Errorf("%s: %v, want refused %v", tc.url, err, tc.refused)
		}
	}
}

// TestReadStatusRecords: "convoy status" and /group report on the
// members whose records are usable, list the others as ignored, and send
// the token to no member over plain HTTP across a network.
func TestReadStatusRecords(t *testing.T) {
	const prefix = "/convoy/"
	etcd := startTestEtcd(t)
	cli, err := etcd.Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	var tokens []string
	var mu sync.Mutex
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, `{"id":1,"epoch":0,"members":[],"serving":false,"applied":4}`)
	}))
	defer member.Close()
	// A port nothing listens on, at an address that is not loopback: no
	// request may even be tried.
	for key, value := range map[string]string{
		"1": fmt.Sprintf(`{"id":1,"app":"kv","url":%q}`, member.URL),
		"2": `{"id":2,"app":"kv","url":"http://192.0.2.1:7102"}`,
		"3": `not a record`,
		"4": `{"id":4,"app":"kv","url":"gopher://127.0.0.1:70"}`,
	} {
		if _, err := cli.Put(t.Context(), httpKeys(prefix)+key, value); err != nil {
			t.Fatal(err)
		}
	}
	r, err := readStatus(t.Context(), cli, apiClient{hc: &http.Client{}, token: "secret"}, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 2 || r.Members[0].ID != 1 || r.Members[1].ID != 2 {
		t.Fatalf("members %+v, want 1 and 2", r.Members)
	}
	if s := r.Members[0].Status; s == nil || s.Applied != 4 {
		t.Errorf("member 1: %+v, %q", s, r.Members[0].Error)
	}
	if !strings.Contains(r.Members[1].Error, errTokenInPlainText.Error()) {
		t.Errorf("member 2: %q, want the token refused", r.Members[1].Error)
	}
	if len(r.Problems) != 2 || !strings.Contains(r.Problems[0], `http/3`) || !strings.Contains(r.Problems[1], `http/4`) {
		t.Errorf("problems %q, want records 3 and 4", r.Problems)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(tokens, []string{"Bearer secret"}) {
		t.Errorf("member 1 saw tokens %q", tokens)
	}
	var b strings.Builder
	if err := r.print(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ignored: API record \"/convoy/http/3\"") {
		t.Errorf("the table does not say record 3 is ignored:\n%s", b.String())
	}
}

// TestQuoteBody: an answer's body in an error is valid UTF-8, printable,
// and bounded, whatever the member sent.
func TestQuoteBody(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"", `""`},
		{`{"error":"busy"}`, `"{\"error\":\"busy\"}"`},
		{"\n\x8d0", `"\n\x8d0"`},
		{strings.Repeat("a", maxQuotedBody+1), `"` + strings.Repeat("a", maxQuotedBody) + `"…`},
	} {
		if got := quoteBody([]byte(tc.body)); got != tc.want {
			t.Errorf("quoteBody(%q) = %s, want %s", tc.body, got, tc.want)
		}
	}
}
