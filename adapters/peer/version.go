package peer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The peer protocol's versions. Nodes of two Ferry versions run side by
// side during a rolling update: every call carries the range of protocol
// versions its client speaks, the server answers in the highest version
// both speak, and a call with no version in common is refused with an
// error naming both ranges (FailedPrecondition: upgrading the older node
// is the way out, not a retry). A call without the header comes from a
// node older than the header: version 1.
//
// Within a version, messages only gain optional fields (JSON, unknown
// fields ignored, absent ones zero): a change an older node would
// misread is a new version, and a build keeps serving the previous one
// for at least one release (MinProtocol), so that N-1 and N always
// interoperate.
//
// Versions:
//
//	1: listings, plaintext streams, promises.
//	2: the same messages; a stream may be raw (`zfs send -w`, an encrypted
//	   volume's). A server never sends a raw stream to a client agreed on
//	   version 1 (it could not take it): such a call is refused with
//	   FailedPrecondition (ports.ErrRawUnsupported); plaintext volumes are
//	   served to version 1 as ever.
const (
	// Protocol is the newest version this build speaks.
	Protocol = 2
	// MinProtocol is the oldest version this build still speaks.
	MinProtocol = 1
	// protocolHeader carries a client's range ("1-2") on every call, and
	// the version the server answers in on its response header.
	protocolHeader = "ferry-peer-protocol"
)

// rawStreams is the first version whose clients take raw streams.
const rawStreams = 2

// agreed is the version the server answers a call in (negotiate checked
// it already); 0 when it cannot be read.
func agreed(ctx context.Context, ours versions) int {
	md, _ := metadata.FromIncomingContext(ctx)
	theirs, err := parseVersions(md.Get(protocolHeader))
	if err != nil {
		return 0
	}
	v, err := agree(ours, theirs)
	if err != nil {
		return 0
	}
	return v
}

// versions is a range of protocol versions.
type versions struct{ min, max int }

func (v versions) String() string { return fmt.Sprintf("%d-%d", v.min, v.max) }

var speaks = versions{MinProtocol, Protocol}

// parseVersions reads a client's range; absent: an older node's, 1-1.
func parseVersions(vals []string) (versions, error) {
	if len(vals) == 0 {
		return versions{1, 1}, nil
	}
	lo, hi, ok := strings.Cut(vals[0], "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || a < 1 || b < a {
		return versions{}, fmt.Errorf("peer protocol: unreadable version range %q", vals[0])
	}
	return versions{a, b}, nil
}

// agree is the version a server speaking ours answers a client speaking
// theirs in.
func agree(ours, theirs versions) (int, error) {
	v := min(ours.max, theirs.max)
	if v < ours.min || v < theirs.min {
		return 0, fmt.Errorf("peer protocol: this node speaks versions %s, the calling node %s: no version in common; upgrade the older node", ours, theirs)
	}
	return v, nil
}

// negotiate checks a call's protocol range and answers the version agreed
// on in the response header.
func negotiate(ctx context.Context, ours versions) error {
	md, _ := metadata.FromIncomingContext(ctx)
	theirs, err := parseVersions(md.Get(protocolHeader))
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	v, err := agree(ours, theirs)
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(protocolHeader, strconv.Itoa(v)))
	return nil
}

func serverVersioning(ours versions) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := negotiate(ctx, ours); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := negotiate(ss.Context(), ours); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

func clientVersioning(ours versions) []grpc.DialOption {
	tag := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, protocolHeader, ours.String())
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return inv(tag(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return s(tag(ctx), desc, cc, method, opts...)
		}),
	}
}
