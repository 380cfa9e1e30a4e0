package volume

// StreamFeatures are what a send stream may carry beyond a plain one:
// each needs the receiving pool to take it, and a pool that cannot makes
// the receive fail, so a sender adds one only where the receiver said it
// takes it (SendFeatures).
//
//   - Compressed: blocks sent as they are compressed on disk, neither
//     decompressed by the sender nor compressed again by the receiver
//     (OpenZFS `zfs send -c`): fewer bytes and less CPU for compressible
//     data. The receiving pool must know every compression algorithm the
//     blocks may use.
//   - LargeBlocks: blocks above 128 KiB (a recordsize above 128k) sent
//     whole instead of split (`-L`); the receiving pool needs large
//     blocks. Once a copy holds large blocks, its later incrementals must
//     carry them too: a pool that offers them offers them for good.
//   - Embedded: blocks small enough to live inside their block pointer
//     sent as such (`-e`); the receiving pool needs embedded data.
type StreamFeatures struct {
	Compressed, LargeBlocks, Embedded bool
}

// And is what both f and g have.
func (f StreamFeatures) And(g StreamFeatures) StreamFeatures {
	return StreamFeatures{Compressed: f.Compressed && g.Compressed, LargeBlocks: f.LargeBlocks && g.LargeBlocks, Embedded: f.Embedded && g.Embedded}
}

// None reports whether f adds nothing to a plain stream.
func (f StreamFeatures) None() bool { return f == StreamFeatures{} }

// SendFeatures decides what a stream carries beyond a plain one: what the
// sending pool can send and the receiver said it takes, both. A raw
// stream (an encrypted volume's) carries its blocks exactly as on disk
// already, and gains nothing.
func SendFeatures(sender, receiver StreamFeatures, raw bool) StreamFeatures {
	if raw {
		return StreamFeatures{}
	}
	return sender.And(receiver)
}
