package cni

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// DialAgent connects to the host agent's admin socket.
func DialAgent(socket string) (Registry, error) {
	c, err := agentapi.DialAdmin(socket)
	if err != nil {
		return nil, err // a nil *AdminClient must not become a non-nil Registry
	}
	return c, nil
}

// cniCode maps the agent's wire error code to the closest CNI error code,
// so a runtime can tell "retry later" from "this request is wrong".
func cniCode(err error) uint {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return types.ErrInternal
	}
	switch pe.Code {
	case protocol.CodeUnavailable:
		return types.ErrTryAgainLater
	case protocol.CodeInvalid, protocol.CodeDenied:
		return types.ErrInvalidNetworkConfig
	case protocol.CodeNotFound:
		return types.ErrUnknownContainer
	default:
		return types.ErrInternal
	}
}
