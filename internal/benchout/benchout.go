// Package benchout holds the records the convoy command's benchmarks print
// with -json, one JSON object per line, shared with the programs that
// read them (the comparison benchmark's workload m), so that both agree
// on the fields.
package benchout

// Multicast is one line of "convoy bench multicast -json": one algorithm
// at one group size.
type Multicast struct {
	Algo       string `json:"algo"`
	Nodes      int    `json:"nodes"`
	Bytes      int    `json:"bytes"`
	BlockBytes int    `json:"block_bytes"`
	// Seconds is the median time from the Send call to the last
	// receiver's Complete.
	Seconds float64 `json:"seconds"`
	// UnicastSeconds is the same for a single receiver.
	UnicastSeconds float64 `json:"unicast_seconds"`
	// Ratio is Seconds / UnicastSeconds.
	Ratio float64 `json:"ratio"`
}
