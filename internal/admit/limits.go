package admit

import (
	"cmp"

	"github.com/convoy-gcs/convoy"
)

// Limits returns a service's bounds on its requests in flight, filling in
// those left zero: maxRequests becomes defaultRequests, or the group's
// window of messages (cfg.WindowMessages, or its default) if that is
// smaller, since a request beyond the window would only wait in Send;
// maxBytes becomes the window's bytes (cfg.WindowBytes, or its default),
// or largest, what the largest request the service accepts counts, if
// that is more, so that one such request always fits.
func Limits(cfg convoy.Config, maxRequests, maxBytes, defaultRequests, largest int) (int, int) {
	d := convoy.DefaultConfig() // the window the group will have
	windowMessages := cmp.Or(cfg.WindowMessages, d.WindowMessages)
	windowBytes := cmp.Or(cfg.WindowBytes, d.WindowBytes)
	if maxRequests == 0 {
		maxRequests = min(defaultRequests, windowMessages)
	}
	if maxBytes == 0 {
		maxBytes = max(windowBytes, largest)
	}
	return maxRequests, maxBytes
}
