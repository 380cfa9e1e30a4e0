package zfs

import (
	"encoding/binary"
	"io"
	"sync"
)

// A send stream starts with a DRR_BEGIN record: drr_type and
// drr_payloadlen (uint32 each), then drr_begin with drr_magic at offset 8,
// drr_toguid at 40 and drr_fromguid at 48, in the sender's byte order
// (told by the magic).
const (
	drrBeginLen   = 56
	drrMagic      = 0x2F5bacbac
	drrMagicOff   = 8
	drrFromGUIDAt = 48
)

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
	if len(h.head) < drrBeginLen {
		return 0, false
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if order.Uint64(h.head[drrMagicOff:]) == drrMagic {
			return order.Uint64(h.head[drrFromGUIDAt:]), true
		}
	}
	return 0, false
}
