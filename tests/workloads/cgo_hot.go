// cgo_hot: burns CPU for os.Args[1] seconds (default 3) in C, called from Go:
//
//	main.main -> main.goCaller -> main._Cfunc_c_hot -> runtime.cgocall
//	  -> runtime.asmcgocall (switches to the g0 stack) -> _cgo_..._Cfunc_c_hot -> c_hot
//
// The C code runs on the thread's system stack, not the goroutine's: an
// unwinder that does not know where runtime.asmcgocall left the goroutine's
// stack pointer stops at asmcgocall and loses main.main and main.goCaller.
//
// c_hot returns after a fixed amount of work so that the Go side, not C,
// checks the clock; almost all the time is still spent inside c_hot.
package main

/*
#cgo CFLAGS: -O1 -g -fno-omit-frame-pointer

__attribute__((noinline)) unsigned long c_hot(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s += i ^ (s >> 3);
	return s;
}
*/
import "C"

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func goCaller(n uint64) uint64 {
	return uint64(C.c_hot(C.ulong(n)))
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
		sink += goCaller(5000000)
	}
}
