package shard

import (
	"crypto/aes"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/credential"
)

// bindPlatform gives the shard the platform token platformToken, as the
// control plane does.
func (h *harness) bindPlatform() {
	h.t.Helper()
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(platformToken))
	if !h.in.Push(message.Inbound{Kind: message.InBindPlatform, Principal: d.Principal(), Digest: d}) {
		h.t.Fatal("inbox full")
	}
	h.s.Poll(t0)
}

// reservationOf is the wire id this process gives engine handle id on
// shard: for a test that names another shard's reservation.
func reservationOf(shard uint16, id uint64) string {
	var w [2 + aes.BlockSize]byte
	return string(appendReservationID(nil, &w, reservationKey(), shard, id))
}
