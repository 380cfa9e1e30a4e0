package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Identity serves the CSI Identity service.
type Identity struct {
	csi.UnimplementedIdentityServer
	Name, Version string
	// Ready reports whether the process can serve (its store answers).
	Ready func(ctx context.Context) error
}

func (i *Identity) GetPluginInfo(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.Name, VendorVersion: i.Version}, nil
}

func (i *Identity) GetPluginCapabilities(ctx context.Context, _ *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// The capabilities are the plugin's as a whole, the same from every
	// process: the node plugin says CONTROLLER_SERVICE too, because the
	// plugin provides it (from the controller Deployment).
	caps := []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (i *Identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if i.Ready != nil {
		if err := i.Ready(ctx); err != nil {
			return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
