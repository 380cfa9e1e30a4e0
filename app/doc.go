// Package app holds no code: Ferry's use cases, what a CSI call or a
// replication event means in terms of the ports, live in rooms named for
// what they carry out, each validating with the domain's rules and
// handing the answer to the ports:
//
//	app/provision      the CSI controller's use cases (provision.Service)
//	app/publish        the CSI node's use cases, the hand-over of a
//	                   replicated volume on publish (publish.Service)
//	app/replication    a replica's volume manager and its watchdog
//	                   (replication.Replicator, replication.Watchdog)
//	app/failover       the daemon's node-loss use cases (Guard, Survivor,
//	                   Takers)
//	app/orchestration  Kubernetes' view kept in line with the replicas
//	                   (the daemon's Placement loop over the Labeler and
//	                   the Adopter; the Binder)
//
// Two small packages serve more than one room: app/refusal names why a
// use case refuses a call (mapped to gRPC codes in one place,
// adapters/csi/codes.go), app/volumelock serialises work per volume.
package app
