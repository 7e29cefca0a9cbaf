package fleet

import (
	"context"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
)

// AnnouncementSource carries what the nodes of a fleet tell each other
// about accounts' funding (pgstore.Store's Announce and
// FollowAnnouncements).
type AnnouncementSource interface {
	Announce(ctx context.Context, kind, holder string, account core.AccountID, units core.CostUnits) error
	FollowAnnouncements(ctx context.Context, fn func(kind, holder string, account core.AccountID, units core.CostUnits) error) error
}

// Hearer applies another node's announcement (control.Plane).
type Hearer interface {
	Heard(a plane.Announcement)
}

// Announcements joins a node to its fleet's announcements: it sends the
// node's own (Send, from the plane's hooks) and hands every other node's
// to the plane. A node that asks for an account's units (want) has them
// back from the nodes holding them within about a release and an
// acquisition (docs/FLEET.md).
type Announcements struct {
	Source AnnouncementSource
	Holder string // this node's name on its leases: its own announcements are not for it
	Plane  Hearer
	// OnError, if set, hears announcements that could not be sent.
	OnError func(err error)
}

var kinds = map[plane.AnnounceKind]string{plane.Want: "want", plane.Returned: "returned"}

// Send announces a to the other nodes.
func (n *Announcements) Send(ctx context.Context, a plane.Announcement) {
	kind, ok := kinds[a.Kind]
	if !ok {
		return
	}
	if err := n.Source.Announce(ctx, kind, n.Holder, a.Account, a.Holding); err != nil && n.OnError != nil {
		n.OnError(err)
	}
}

// Run hands the other nodes' announcements to the plane until ctx ends.
func (n *Announcements) Run(ctx context.Context) error {
	return n.Source.FollowAnnouncements(ctx, func(kind, holder string, account core.AccountID, units core.CostUnits) error {
		if holder == n.Holder {
			return nil
		}
		for k, name := range kinds {
			if name == kind {
				n.Plane.Heard(plane.Announcement{Kind: k, Account: account, Holding: units, From: holder})
			}
		}
		return nil
	})
}
