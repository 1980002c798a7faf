// Package httpauth guards an HTTP handler with a bearer token (RFC 6750):
// a request is served only if it carries the header
//
//	Authorization: Bearer <token>
//
// with the token the handler was given; any other gets 401 Unauthorized
// with a WWW-Authenticate challenge. "convoy node" puts it in front of
// the example services (examples/paxos, examples/log), whose Go clients
// send the token (their WithToken options).
//
// A token authenticates whoever holds it: send it over TLS only.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// ErrBadToken is returned by Bearer and CheckToken for a token that a
// header cannot carry as a bearer token: one that is empty or holds a
// character outside RFC 6750's b64token (A-Z, a-z, 0-9, "-", ".", "_",
// "~", "+", "/", then "=" padding only).
var ErrBadToken = errors.New("httpauth: a token is one or more of A-Z a-z 0-9 - . _ ~ + / then any = (RFC 6750)")

// Realm is the realm the challenge names.
const Realm = "convoy"

// CheckToken returns ErrBadToken if token cannot be a bearer token.
func CheckToken(token string) error {
	body := strings.TrimRight(token, "=")
	if body == "" {
		return ErrBadToken
	}
	for _, c := range []byte(body) {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return ErrBadToken
		}
	}
	return nil
}

// Bearer returns a handler that serves a request with next only if its
// Authorization header carries token as a bearer token (the scheme's
// name in any case). Any other request gets 401 Unauthorized with
// the challenge WWW-Authenticate: Bearer realm="convoy" (with
// error="invalid_token" if it carried another token) and the JSON body
// {"error": "..."}, as the example services answer errors. The token
// offered is compared in constant time, and its length does not show
// either: the handler compares SHA-256 digests.
//
// The handler passes next the http.ResponseWriter it was given, not a
// wrapper, so next may take over the connection (http.Hijacker), as a
// protocol upgrade does once it is authorized. It returns ErrBadToken
// for a token that cannot be a bearer token.
func Bearer(token string, next http.Handler) (http.Handler, error) {
	if err := CheckToken(token); err != nil {
		return nil, err
	}
	return &guard{want: sha256.Sum256([]byte(token)), next: next}, nil
}

// guard is the handler Bearer returns.
type guard struct {
	want [sha256.Size]byte
	next http.Handler
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	offered, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		refuse(w, `Bearer realm="`+Realm+`"`, "this API needs a bearer token: the header Authorization: Bearer <token>")
		return
	}
	got := sha256.Sum256([]byte(offered))
	if subtle.ConstantTimeCompare(got[:], g.want[:]) != 1 {
		refuse(w, `Bearer realm="`+Realm+`", error="invalid_token"`, "wrong bearer token")
		return
	}
	g.next.ServeHTTP(w, r)
}

// bearerToken returns the token of an Authorization header's value of
// the Bearer scheme.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}

// refuse answers 401 with the challenge and the message.
func refuse(w http.ResponseWriter, challenge, msg string) {
	b, err := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	if err != nil {
		b = []byte(`{"error":"unauthorized"}`)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(append(b, '\n'))
}
