package peer

import (
	"bufio"
	"net"
	"sync"
)

// TLS seals at most 16 KiB per record and crypto/tls writes each record
// with its own write(2), and reads a record at a time: a snapshot stream
// cost a system call per 16 KiB on each side, most of the transport's CPU
// (CPU profiles of make bench-replication: 73 % of the sender's, 59 % of
// the receiver's). Below TLS, the connection is read through a large
// buffer, and the records of one write of gRPC's (its flush of up to
// bufferSize) are gathered and written in pieces of batchSize. Nothing of
// the protocol changes: the same records, in the same order, on the same
// mutually authenticated connection.

// batchSize is how much of the records of one write is gathered before it
// is written: large enough to save most system calls, small enough that
// the receiver starts decrypting before the sender has sealed a whole
// flush (both sides work in parallel on two cores).
const batchSize = 256 << 10

// batchConn is the raw connection under TLS: reads come through a
// buffer, and writes made while batching are gathered.
type batchConn struct {
	net.Conn
	r *bufio.Reader

	mu       sync.Mutex
	batching bool
	buf      []byte
}

func newBatchConn(c net.Conn) *batchConn {
	return &batchConn{Conn: c, r: bufio.NewReaderSize(c, bufferSize)}
}

func (c *batchConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write writes p, or gathers it while batching (TLS writes whole records:
// a record is never split between two system calls more than the kernel
// would).
func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.batching {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= batchSize {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *batchConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

func (c *batchConn) startBatch() {
	c.mu.Lock()
	c.batching = true
	c.mu.Unlock()
}

// endBatch writes what was gathered and stops gathering.
func (c *batchConn) endBatch() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batching = false
	return c.flushLocked()
}

// batchedTLS is the TLS connection gRPC uses: each of its writes is
// sealed into records that go out in batches, all of them before the
// write returns (gRPC's flow control and its error handling see a write
// as done only when it is on the wire, as before).
type batchedTLS struct {
	net.Conn // the TLS connection
	raw      *batchConn
	wmu      sync.Mutex // one write's batch at a time
}

func (c *batchedTLS) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.startBatch()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.endBatch(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}
