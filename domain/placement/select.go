package placement

import (
	"hash/fnv"

	"github.com/ferry-csi/ferry/domain/replica"
)

// SelectNode chooses the node that provisions a claim with Immediate
// binding (no pod tells where it should live): the node of highest
// rendezvous weight for the claim's identity among the candidates (the
// nodes running Ferry). Every daemon computes the same answer from the
// same candidates, so no leader is needed: the first to write the choice
// wins and the others find it written. Claims spread evenly, and a node
// joining or leaving moves only the claims it wins or held.
func SelectNode(claim string, candidates []replica.Node) (replica.Node, bool) {
	var best replica.Node
	var bestWeight uint64
	found := false
	for _, n := range candidates {
		h := fnv.New64a()
		_, _ = h.Write([]byte(claim))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(n))
		w := mix(h.Sum64())
		if !found || w > bestWeight || (w == bestWeight && n < best) {
			best, bestWeight, found = n, w, true
		}
	}
	return best, found
}

// mix is a 64-bit finalizer (splitmix64's): FNV's low-entropy high bits
// would otherwise favour some nodes.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
