package peer

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/mem"
)

// chunk is one piece of a snapshot stream on the wire. The sender fills
// out (a pooled buffer whose ownership passes to gRPC); the receiver gets
// in (gRPC's own buffers, referenced rather than copied, freed once
// written).
type chunk struct {
	out mem.Buffer
	in  mem.BufferSlice
}

// codec carries chunks as raw bytes without copying them, and every other
// message as JSON (gRPC's CodecV2: buffers are reference-counted).
type codec struct{}

func (codec) Name() string { return "ferry-peer" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if c, ok := v.(*chunk); ok {
		return mem.BufferSlice{c.out}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if c, ok := v.(*chunk); ok {
		data.Ref() // gRPC frees its reference when Unmarshal returns
		c.in = data
		return nil
	}
	if err := json.Unmarshal(data.Materialize(), v); err != nil {
		return fmt.Errorf("peer message: %w", err)
	}
	return nil
}
