// hot_go: burns CPU for os.Args[1] seconds (default 3) in
//
//	main.main -> main.outer -> main.hotLoop
//
// Go 1.19 on amd64 keeps frame pointers, so a frame-pointer unwinder sees
// this chain. The binary is named hot_go (not hot) so it does not collide
// with the Rust workload in build/workloads.
//
// hotLoop keeps its state in a small array indexed at run time, which puts it
// on the stack: the Go compiler saves BP only in functions with a non-empty
// frame, and without that a frame-pointer unwinder would skip main.outer.
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func hotLoop(n int) uint64 {
	var st [4]uint64
	for i := 0; i < n; i++ {
		st[i&3] += uint64(i) ^ (st[(i+1)&3] >> 3)
	}
	return st[0] + st[1] + st[2] + st[3]
}

//go:noinline
func outer(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for j := 0; j < 16; j++ {
			sink += hotLoop(100000)
		}
	}
}

func main() {
	secs := 3.0
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil && v > 0 {
			secs = v
		}
	}
	outer(time.Duration(secs * float64(time.Second)))
}
