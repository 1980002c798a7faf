package admit

import "net/http"

// BodySize returns what a request's body of at most limit bytes is
// counted as before it is read: its declared length, or limit if it
// declares none. It returns false for a declared length above limit,
// a request the service answers with 413.
func BodySize(r *http.Request, limit int) (size int, ok bool) {
	if r.ContentLength > int64(limit) {
		return 0, false
	}
	if r.ContentLength >= 0 {
		return int(r.ContentLength), true
	}
	return limit, true
}

// AdmitHTTP admits a request that holds bytes and returns the func that
// releases its place, to be called once the request is answered. With
// no place, it counts a refusal for refused, answers w with refuse (the
// service's 503 with Retry-After) and returns false.
func (a *Metered) AdmitHTTP(w http.ResponseWriter, bytes int, refused Reason, refuse func(http.ResponseWriter)) (release func(), ok bool) {
	if !a.Admit(bytes, refused) {
		refuse(w)
		return nil, false
	}
	return func() { a.Release(bytes) }, true
}

// Handler wraps h, a handler of requests without a body to count, so
// that it serves them only with a place, held until h returns. Without
// one, it counts a refusal for refused and answers with refuse instead.
func (a *Metered) Handler(h http.HandlerFunc, refused Reason, refuse func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.Admit(0, refused) {
			refuse(w)
			return
		}
		defer a.Release(0)
		h(w, r)
	}
}
