package rdma

// ring is a FIFO queue backed by a circular buffer whose length is a power
// of two. It reuses its storage, so a queue that reaches a steady size stops
// allocating. The zero value is an empty queue. It is not safe for
// concurrent use.
type ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int // number of elements; 0 ≤ n ≤ len(buf)
}

// len returns the number of queued elements.
func (r *ring[T]) len() int { return r.n }

// push appends v at the tail.
func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// pop removes and returns the oldest element.
func (r *ring[T]) pop() (T, bool) {
	var zero T
	if r.n == 0 {
		return zero, false
	}
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop references for the garbage collector
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v, true
}

// peek returns a pointer to the oldest element, or nil if r is empty.
func (r *ring[T]) peek() *T {
	if r.n == 0 {
		return nil
	}
	return &r.buf[r.head]
}

// at returns a pointer to the i-th oldest element; 0 ≤ i < r.len().
func (r *ring[T]) at(i int) *T {
	return &r.buf[(r.head+i)&(len(r.buf)-1)]
}

// clear removes every element.
func (r *ring[T]) clear() {
	for r.n > 0 {
		r.pop()
	}
	r.head = 0
}

// filter keeps, in order, only the elements for which keep returns true.
func (r *ring[T]) filter(keep func(*T) bool) {
	var zero T
	kept := 0
	for i := 0; i < r.n; i++ {
		p := r.at(i)
		if keep(p) {
			*r.at(kept) = *p
			kept++
		}
	}
	for i := kept; i < r.n; i++ {
		*r.at(i) = zero
	}
	r.n = kept
}

func (r *ring[T]) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 8
	}
	buf := make([]T, size)
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	r.buf = buf
	r.head = 0
}
