//go:build !linux

package netns

import (
	"fmt"
	"time"
)

func (s *Switch) startDelayer(i int, queue uint16, delay, jitter time.Duration, seed uint64) (func() error, error) {
	return nil, fmt.Errorf("%w: netfilter queues exist on Linux only", ErrUnsupported)
}
