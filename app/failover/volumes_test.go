package failover

import (
	"testing"

	"github.com/ferry-csi/ferry/ports"
)

// The view follows the feed's changes: a newer state replaces the last,
// and a volume gone is forgotten (the Guard no longer fences from it).
func TestTheViewAppliesTheFeedsChangesDeletionsIncluded(t *testing.T) {
	v := NewVolumes()
	v.Apply(ports.StateChange{Volume: "v", State: primaryState("v", "a", "b")})
	v.Apply(ports.StateChange{Volume: "w", State: primaryState("w", "a", "b")})
	moved := primaryState("v", "b", "a")
	moved.Epoch = 4
	v.Apply(ports.StateChange{Volume: "v", State: moved})
	if got := v.PrimaryOn("a"); len(got) != 1 || got[0].Volume != "w" {
		t.Fatalf("primaries on a: %v, want w alone", got)
	}
	v.Apply(ports.StateChange{Volume: "w", Gone: true})
	if v.Known("w") || !v.Known("v") || len(v.All()) != 1 {
		t.Fatalf("after w gone the view holds %v", v.All())
	}
	v.Apply(ports.StateChange{Volume: "x", Gone: true}) // never seen: nothing to forget
	if len(v.All()) != 1 {
		t.Fatalf("a Gone of an unknown volume changed the view: %v", v.All())
	}
}
