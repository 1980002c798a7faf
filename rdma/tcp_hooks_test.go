package rdma

// numConns returns the number of connections the endpoint has, pending or
// up. Tests use it.
func (e *TCPEndpoint) numConns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.conns)
}

// breakConnForTest closes the socket of the connection to peer, as a
// network failure would. Tests use it.
func (e *TCPEndpoint) breakConnForTest(peer NodeID) {
	e.mu.Lock()
	c := e.mu.conns[peer]
	e.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	nc := c.mu.nc
	c.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
}
