//go:build !linux

package spool

import "errors"

// exchange needs renameat2(RENAME_EXCHANGE): two plain renames would leave
// a moment without a spool directory, in which a starting daemon would
// create an empty one and never bill the rebuilt records.
func exchange(a, b string) error { return errors.ErrUnsupported }
