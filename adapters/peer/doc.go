// Package peer is Ferry's node-to-node snapshot transport: a gRPC service
// on every node that lists a volume's replication snapshots and streams
// `zfs send` output, and the client (ports.Transport) that fetches them.
//
// Wire format: the service ferry.peer.v1.Peer has two methods, Snapshots
// (unary) and Send (server streaming). Requests and listings are JSON; the
// stream is raw bytes in chunks of up to ChunkSize, carried by a codec that
// hands the bytes to gRPC without protobuf framing or extra copies. gRPC's
// flow control is the back-pressure: the sender blocks when the receiver's
// window is full, so a slow `zfs recv` slows `zfs send` down rather than
// buffering the volume in memory.
//
// Security: peers authenticate each other with mutual TLS (certificates and
// a CA from files, which a Kubernetes Secret mounts). Plaintext exists only
// behind an explicit insecure option for tests. The server serves only
// datasets Ferry owns (the store checks the ownership property), validates
// every name with the domain's rules, and logs every refusal with the
// peer's identity.
package peer
