package placement

import (
	"fmt"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestSelectNodeSpreadsClaimsEvenlyAndMovesFewWhenANodeJoins(t *testing.T) {
	three := []replica.Node{"node1", "node2", "node3"}
	count := map[replica.Node]int{}
	before := map[string]replica.Node{}
	const claims = 3000
	for i := range claims {
		c := fmt.Sprintf("uid-%d", i)
		n, ok := SelectNode(c, three)
		if !ok {
			t.Fatal("no node chosen among three")
		}
		count[n]++
		before[c] = n
	}
	for _, n := range three {
		if got := count[n]; got < claims/3*85/100 || got > claims/3*115/100 {
			t.Fatalf("%s got %d of %d claims: %v (want about a third each)", n, got, claims, count)
		}
	}
	// The same answer whatever the order of the candidates.
	if a, _ := SelectNode("uid-7", three); a != func() replica.Node { n, _ := SelectNode("uid-7", []replica.Node{"node3", "node1", "node2"}); return n }() {
		t.Fatal("the choice depends on the order of the candidates")
	}
	// A fourth node takes about a quarter, from every node, and nothing
	// else moves.
	moved := 0
	for c, was := range before {
		now, _ := SelectNode(c, append(three, "node4"))
		if now != was {
			if now != "node4" {
				t.Fatalf("claim %s moved from %s to %s, not to the new node", c, was, now)
			}
			moved++
		}
	}
	if moved < claims/4*80/100 || moved > claims/4*120/100 {
		t.Fatalf("%d of %d claims moved to the new node, want about a quarter", moved, claims)
	}
	if _, ok := SelectNode("uid-1", nil); ok {
		t.Fatal("a node was chosen among none")
	}
}
