// Writes a CPU profile of its own busy loop with runtime/pprof, the way Go
// services expose it at /debug/pprof/profile: a real pprof file from a
// program that is not ours, for the server's pprof ingest.
package main

import (
	"os"
	"runtime/pprof"
	"time"
)

var sink uint64

//go:noinline
func goSpin(n int) {
	for i := 0; i < n; i++ {
		sink += uint64(i) * sink
	}
}

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		panic(err)
	}
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		goSpin(100000)
	}
	pprof.StopCPUProfile()
	f.Close()
}
