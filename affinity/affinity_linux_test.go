//go:build linux

package affinity

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// threadMask returns the calling thread's affinity mask as a sorted list.
func threadMask() ([]int, error) {
	set := unix.NewCPUSet(MaxCPU)
	if err := unix.SchedGetaffinityDynamic(0, set); err != nil {
		return nil, err
	}
	return cpusOf(set), nil
}

// currentCPU returns the CPU the calling thread is running on.
func currentCPU() (int, error) {
	var cpu uint32
	_, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(cpu), nil
}

func TestAllowedMatchesNumCPU(t *testing.T) {
	// On Linux runtime.NumCPU counts the same sched_getaffinity mask, read
	// at start; nothing in this test binary changes the process mask.
	if cpus := mustAllowed(t); len(cpus) != runtime.NumCPU() {
		t.Fatalf("Allowed %v has %d CPUs, NumCPU is %d", cpus, len(cpus), runtime.NumCPU())
	}
	if !Supported() {
		t.Fatal("Supported is false on Linux")
	}
}

// pinAndCheck pins a fresh goroutine's thread to cpu and checks, from that
// thread, that its mask is exactly {cpu}, that it runs there, that Allowed
// still reports the whole process mask, and that Unpin restores the mask.
func pinAndCheck(cpu int, allowed []int) error {
	errc := make(chan error)
	go func() {
		errc <- func() error {
			if err := Pin(cpu); err != nil {
				return fmt.Errorf("Pin(%d): %v", cpu, err)
			}
			for range 3 {
				mask, err := threadMask()
				if err != nil {
					return err
				}
				if !slices.Equal(mask, []int{cpu}) {
					return fmt.Errorf("pinned to %d, thread mask %v", cpu, mask)
				}
				if on, err := currentCPU(); err != nil {
					return fmt.Errorf("getcpu: %v", err)
				} else if on != cpu {
					return fmt.Errorf("pinned to %d, running on %d", cpu, on)
				}
				// A locked goroutine resumes on the same thread after
				// yielding, so the checks must hold again.
				runtime.Gosched()
			}
			if got, err := Allowed(); err != nil || !slices.Equal(got, allowed) {
				return fmt.Errorf("Allowed from a pinned thread = %v, %v; want %v", got, err, allowed)
			}
			if err := Unpin(); err != nil {
				return fmt.Errorf("Unpin: %v", err)
			}
			// The goroutine may move threads now, but every unpinned thread
			// carries the process mask.
			if mask, err := threadMask(); err != nil || !slices.Equal(mask, allowed) {
				return fmt.Errorf("after Unpin mask %v, %v; want %v", mask, err, allowed)
			}
			return nil
		}()
	}()
	return <-errc
}

func TestPinEachCPU(t *testing.T) {
	allowed := mustAllowed(t)
	for _, cpu := range allowed {
		if err := pinAndCheck(cpu, allowed); err != nil {
			t.Error(err)
		}
	}
}

func TestPinNested(t *testing.T) {
	allowed := mustAllowed(t)
	first, last := allowed[0], allowed[len(allowed)-1]
	errc := make(chan error)
	go func() {
		errc <- func() error {
			if err := Pin(first); err != nil {
				return err
			}
			if err := Pin(last); err != nil {
				return err
			}
			if mask, _ := threadMask(); !slices.Equal(mask, []int{last}) {
				return fmt.Errorf("re-pinned to %d, mask %v", last, mask)
			}
			if err := Unpin(); err != nil {
				return err
			}
			// Still locked by the outer Pin, so this is the same thread.
			if mask, _ := threadMask(); !slices.Equal(mask, allowed) {
				return fmt.Errorf("after inner Unpin mask %v, want %v", mask, allowed)
			}
			return Unpin()
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestPinDisallowedLeavesThread checks that a refused Pin did not change the
// thread's mask.
func TestPinDisallowedLeavesThread(t *testing.T) {
	allowed := mustAllowed(t)
	id := firstDisallowed(allowed)
	if id < 0 {
		t.Skip("every CPU id is allowed")
	}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := Pin(id); err == nil {
			errc <- fmt.Errorf("Pin(%d) succeeded", id)
			return
		}
		mask, err := threadMask()
		if err == nil && !slices.Equal(mask, allowed) {
			err = fmt.Errorf("mask after refused Pin %v, want %v", mask, allowed)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

const childEnv = "AFFINITY_TEST_CHILD_CPU"

// TestInheritedMask starts this test binary from a thread pinned to one CPU,
// so the child process starts with a one-CPU mask, as under taskset -c. The
// child (TestInheritedMaskChild) checks that Allowed reports only that CPU
// and that Pin refuses the others.
func TestInheritedMask(t *testing.T) {
	allowed := mustAllowed(t)
	if len(allowed) < 2 {
		t.Skip("needs two allowed CPUs")
	}
	cpu := allowed[len(allowed)-1]
	type result struct {
		out []byte
		err error
	}
	done := make(chan result)
	go func() {
		if err := Pin(cpu); err != nil {
			done <- result{nil, err}
			return
		}
		defer Unpin()
		// The child is forked from this thread and inherits its mask.
		cmd := exec.Command(os.Args[0], "-test.run=^TestInheritedMaskChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(cpu))
		out, err := cmd.CombinedOutput()
		done <- result{out, err}
	}()
	r := <-done
	if r.err != nil || !strings.Contains(string(r.out), "--- PASS: TestInheritedMaskChild") {
		t.Fatalf("child: %v\n%s", r.err, r.out)
	}
}

func TestInheritedMaskChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		t.Skip("run by TestInheritedMask")
	}
	cpu, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustAllowed(t); !slices.Equal(got, []int{cpu}) {
		t.Fatalf("Allowed = %v, want [%d]", got, cpu)
	}
	if cpu > 0 {
		errc := make(chan error)
		go func() { errc <- Pin(0) }()
		if err := <-errc; err == nil {
			t.Fatal("Pin(0) outside the inherited mask succeeded")
		}
	}
	if err := pinAndCheck(cpu, []int{cpu}); err != nil {
		t.Fatal(err)
	}
}
