package core

// accountArena allocates accounts in chunks that are never freed or moved,
// so pointers to accounts (held by the principal table and by reservations)
// stay valid, and many accounts share each page. Chunks grow from small to
// large; large ones are advised to the kernel as huge-page candidates, so a
// shard with a million accounts does not pay a TLB miss per request.
type accountArena struct {
	chunk []account
	used  int
}

const (
	firstChunk = 64
	maxChunk   = 1 << 15 // ~20 MiB of accounts per chunk
)

func (r *accountArena) alloc() *account {
	if r.used == len(r.chunk) {
		size := min(max(2*len(r.chunk), firstChunk), maxChunk)
		r.chunk = make([]account, size)
		r.used = 0
		adviseHugePages(r.chunk)
	}
	a := &r.chunk[r.used]
	r.used++
	return a
}
