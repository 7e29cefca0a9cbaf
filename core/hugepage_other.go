//go:build !linux

package core

// adviseHugePages is a no-op where the kernel takes no such advice.
func adviseHugePages[T any](s []T) {}
