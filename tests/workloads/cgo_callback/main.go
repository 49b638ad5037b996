// cgo_callback: Go calls C, which calls back into Go, which burns CPU for
// os.Args[1] seconds (default 3):
//
//	main.main -> main.goCaller -> (cgo) -> C c_middle -> goCallback
//	  -> crosscall2 -> runtime.cgocallback -> ... -> main.hotGo
//
// The stack switches twice: to the g0 (C) stack in runtime.asmcgocall and
// back to the goroutine's in runtime.cgocallback. A complete stack holds
// the Go frames on both sides and the C frames between them.
package main

/*
#cgo CFLAGS: -O1 -g -fno-omit-frame-pointer
void c_middle(int n);
*/
import "C"

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//export goCallback
func goCallback(n C.int) {
	hotGo(int(n))
}

//go:noinline
func hotGo(n int) {
	var st [4]uint64
	for i := 0; i < n; i++ {
		st[i&3] += uint64(i) ^ (st[(i+1)&3] >> 3)
	}
	sink += st[0] + st[1]
}

//go:noinline
func goCaller() {
	C.c_middle(1000000)
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
		goCaller()
	}
}
