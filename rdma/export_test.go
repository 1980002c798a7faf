package rdma

import "testing"

// Backend is a backend under test, for the end-to-end tests of package
// rdma_test, which run the layers above on every backend.
type Backend struct {
	Name string
	// Nodes returns n endpoints, with ids 1 to n, and a function that
	// crashes the node of index i (its connections break under its
	// peers). Everything is closed when t ends.
	Nodes func(t *testing.T, n int) (eps []Endpoint, crash func(i int))
}

// Backends returns the backends every test runs on: those of the
// conformance tests.
func Backends() []Backend {
	var out []Backend
	for _, b := range backends {
		out = append(out, Backend{Name: b.name, Nodes: func(t *testing.T, n int) ([]Endpoint, func(int)) {
			tn := b.new(t)
			eps := make([]Endpoint, n)
			for i := range eps {
				eps[i] = tn.endpoint(NodeID(i + 1))
			}
			crash := func(i int) {
				if m, ok := tn.(*memNet); ok {
					m.f.Crash(NodeID(i + 1))
					return
				}
				eps[i].Close()
			}
			return eps, crash
		}})
	}
	return out
}
