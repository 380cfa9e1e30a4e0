package zfs

import (
	"encoding/binary"
	"io"
	"testing"
)

// begin makes a DRR_BEGIN record in order with the given feature flags.
func begin(order binary.ByteOrder, features uint64) []byte {
	b := make([]byte, drrBeginLen+8)
	order.PutUint64(b[drrMagicOff:], drrMagic)
	order.PutUint64(b[drrVersionInfoAt:], features<<2|2) // DMU_BACKUP_STREAM_VERSION 2 in the low bits
	copy(b[drrBeginLen:], "payload!")
	return b
}

// A resumed transfer (zfs send -t) is told from a fresh one by its
// stream's header, in either byte order, and the reader given back still
// yields every byte.
func TestAStreamsHeaderTellsAResumedTransferFromAFreshOne(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stream   []byte
		resuming bool
	}{
		{"fresh, little endian", begin(binary.LittleEndian, 1<<2|1<<17), false},
		{"resuming, little endian", begin(binary.LittleEndian, 1<<2|featureResuming), true},
		{"resuming, big endian", begin(binary.BigEndian, featureResuming), true},
		{"fresh, big endian", begin(binary.BigEndian, 0), false},
		{"not a send stream", []byte("this is not a zfs send stream at all, nope, not one bit"), false},
		{"too short", []byte{1, 2, 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, r := peekResuming(&oneByteReader{b: tc.stream})
			if got != tc.resuming {
				t.Errorf("resuming = %v; want %v", got, tc.resuming)
			}
			all, err := io.ReadAll(r)
			if err != nil || string(all) != string(tc.stream) {
				t.Errorf("the stream given back is %q, %v; want every byte of %q", all, err, tc.stream)
			}
		})
	}
}

// oneByteReader returns one byte per Read, as a slow pipe may.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}
