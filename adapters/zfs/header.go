package zfs

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
)

// A send stream starts with a DRR_BEGIN record: drr_type and
// drr_payloadlen (uint32 each), then drr_begin with drr_magic at offset 8,
// drr_versioninfo at 16 (its bits 2..31 are the stream's feature flags),
// drr_toguid at 40 and drr_fromguid at 48, in the sender's byte order
// (told by the magic).
const (
	drrBeginLen      = 56
	drrMagic         = 0x2F5bacbac
	drrMagicOff      = 8
	drrVersionInfoAt = 16
	drrFromGUIDAt    = 48
	// featureResuming (DMU_BACKUP_FEATURE_RESUMING) marks a stream made
	// by `zfs send -t`: the rest of an interrupted transfer.
	featureResuming = 1 << 20
)

// beginOrder is the byte order of a DRR_BEGIN record; false when head is
// not one.
func beginOrder(head []byte) (binary.ByteOrder, bool) {
	if len(head) < drrBeginLen {
		return nil, false
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if order.Uint64(head[drrMagicOff:]) == drrMagic {
			return order, true
		}
	}
	return nil, false
}

// peekResuming reads a stream's DRR_BEGIN record and tells whether the
// stream resumes an interrupted transfer; the reader returned gives the
// whole stream, the bytes read included. A stream too short or not a
// send stream is not resuming (zfs recv then refuses it itself).
func peekResuming(r io.Reader) (bool, io.Reader) {
	head := make([]byte, drrBeginLen)
	n, _ := io.ReadFull(r, head)
	head = head[:n]
	whole := io.MultiReader(bytes.NewReader(head), r)
	order, ok := beginOrder(head)
	if !ok {
		return false, whole
	}
	features := (order.Uint64(head[drrVersionInfoAt:]) >> 2) & (1<<30 - 1)
	return features&featureResuming != 0, whole
}

// headerTap passes a stream through and keeps its first bytes, so that a
// refused receive can be explained by the stream's base.
type headerTap struct {
	r    io.Reader
	mu   sync.Mutex
	head []byte
}

func (h *headerTap) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.mu.Lock()
		if missing := drrBeginLen - len(h.head); missing > 0 {
			h.head = append(h.head, p[:min(n, missing)]...)
		}
		h.mu.Unlock()
	}
	return n, err
}

// fromGUID is the GUID of the incremental stream's base; false when the
// header is incomplete or not a send stream's.
func (h *headerTap) fromGUID() (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	order, ok := beginOrder(h.head)
	if !ok {
		return 0, false
	}
	return order.Uint64(h.head[drrFromGUIDAt:]), true
}
