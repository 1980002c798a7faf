//go:build !linux

package netns

import "fmt"

// InHost calls f inside host i's network namespace; network namespaces
// exist on Linux only.
func (s *Switch) InHost(i int, f func() error) error {
	return fmt.Errorf("%w: network namespaces exist on Linux only", ErrUnsupported)
}
