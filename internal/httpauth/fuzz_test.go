package httpauth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzBearer sends the guard arbitrary requests, read from raw bytes as
// the HTTP server reads them, and arbitrary tokens to check them with.
// A token Bearer refuses is one CheckToken refuses. With a good token, a
// request reaches the handler behind exactly when its Authorization
// header is the Bearer scheme (in any case), a space or more, and the
// token; any other gets 401 with a challenge and a JSON error, and
// never reaches the handler.
func FuzzBearer(f *testing.F) {
	f.Fuzz(func(t *testing.T, tok string, raw []byte) {
		reached := false
		h, err := Bearer(tok, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
		if (err != nil) != (CheckToken(tok) != nil) {
			t.Fatalf("Bearer(%q): %v, CheckToken: %v", tok, err, CheckToken(tok))
		}
		if err != nil {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		auth := r.Header.Get("Authorization")
		scheme, rest, _ := strings.Cut(auth, " ")
		want := len(auth) > len("Bearer ") && strings.EqualFold(scheme, "bearer") && strings.TrimLeft(rest, " ") == tok
		if reached != want {
			t.Fatalf("Authorization %q with token %q: reached the handler: %v", auth, tok, reached)
		}
		if reached {
			return
		}
		var e struct {
			Error string `json:"error"`
		}
		if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), `Bearer realm="convoy"`) ||
			json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == "" {
			t.Fatalf("Authorization %q: %d %q %q", auth, w.Code, w.Header(), w.Body)
		}
	})
}
