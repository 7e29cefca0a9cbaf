package core

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugePage = 2 << 20

// adviseHugePages asks the kernel to back the 2 MiB-aligned part of s with
// transparent huge pages (MADV_HUGEPAGE). It is a hint about memory the Go
// heap already owns: it performs no I/O, and failure changes nothing but
// speed, so errors are ignored. Slices smaller than a huge page are skipped.
func adviseHugePages[T any](s []T) {
	if len(s) == 0 {
		return
	}
	size := uintptr(len(s)) * unsafe.Sizeof(s[0])
	start := uintptr(unsafe.Pointer(&s[0]))
	lo := (start + hugePage - 1) &^ (hugePage - 1)
	hi := (start + size) &^ (hugePage - 1)
	if hi <= lo {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&s[0]), lo-start)), hi-lo)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
}
