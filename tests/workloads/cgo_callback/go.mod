module cgo_callback

go 1.19
