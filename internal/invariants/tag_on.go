//go:build invariants

package invariants

const tagEnabled = true
