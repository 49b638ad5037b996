// gc_go: allocates linked lists for os.Args[1] seconds (default 3), so that
// much of its CPU time is the garbage collector's, which runs on the g0
// stack through runtime.systemstack:
//
//	runtime.gcBgMarkWorker -> runtime.systemstack -> ... -> runtime.gcDrain
//	main.main -> main.churn -> runtime.mallocgc -> ... -> runtime.systemstack -> ...
//
// An unwinder that does not know where systemstack left the goroutine's
// stack pointer stops at systemstack and loses everything above it.
package main

import (
	"os"
	"strconv"
	"time"
)

type node struct {
	next *node
	pad  [6]uint64
}

var keep []*node

//go:noinline
func churn() {
	var head *node
	for i := 0; i < 100000; i++ {
		head = &node{next: head}
	}
	keep = append(keep[:0], head)
}

func main() {
	secs := 3.0
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil && v > 0 {
			secs = v
		}
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		churn()
	}
}
