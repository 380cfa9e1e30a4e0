package peer

import (
	"encoding/json"
	"fmt"
)

// chunk is one piece of a snapshot stream on the wire.
type chunk struct{ data []byte }

// codec carries chunks as raw bytes and every other message as JSON.
type codec struct{}

func (codec) Name() string { return "ferry-peer" }

func (codec) Marshal(v any) ([]byte, error) {
	if c, ok := v.(*chunk); ok {
		return c.data, nil
	}
	return json.Marshal(v)
}

func (codec) Unmarshal(data []byte, v any) error {
	if c, ok := v.(*chunk); ok {
		// gRPC may reuse data once Unmarshal returns: keep a copy.
		c.data = append(c.data[:0], data...)
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("peer message: %w", err)
	}
	return nil
}
