//go:build !linux

package affinity

import (
	"errors"
	"testing"
)

func TestPinUnsupported(t *testing.T) {
	if Supported() {
		t.Fatal("Supported on a platform without an affinity API")
	}
	errc := make(chan error)
	go func() {
		err := Pin(0)
		Unpin()
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Pin(0) = %v, want ErrUnsupported", err)
	}
}
