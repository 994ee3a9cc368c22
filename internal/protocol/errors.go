package protocol

import (
	"errors"
	"fmt"
)

// Code is a wire error code (the ERR_CODE attribute of an ERROR message).
type Code uint32

// Error codes of version 1.
const (
	CodeBadMsg      Code = 1  // malformed; closes the connection
	CodeVersion     Code = 2  // unsupported version; closes the connection
	CodeUnknown     Code = 3  // unknown message type
	CodeSequence    Code = 4  // out of order; closes the connection
	CodeDenied      Code = 5  // the caller may not do this
	CodeNotFound    Code = 6  // the named object does not exist
	CodeInvalid     Code = 7  // well-formed but invalid request
	CodeUnavailable Code = 8  // the directory cannot be reached for a write
	CodeInternal    Code = 9  // the agent failed; its log says why
	CodeLimit       Code = 10 // the caller's container is at one of its limits at the agent
)

var codeNames = map[Code]string{
	CodeBadMsg: "BADMSG", CodeVersion: "VERSION", CodeUnknown: "UNKNOWN",
	CodeSequence: "SEQUENCE", CodeDenied: "DENIED", CodeNotFound: "NOTFOUND",
	CodeInvalid: "INVALID", CodeUnavailable: "UNAVAILABLE", CodeInternal: "INTERNAL",
	CodeLimit: "LIMIT",
}

func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code %d", uint32(c))
}

// Closes reports whether the agent closes the connection after replying
// with this code (PROTOCOL.md, Session rule 3).
func (c Code) Closes() bool {
	return c == CodeBadMsg || c == CodeVersion || c == CodeSequence
}

// Error is the one error type of the protocol: its Code becomes the wire
// status and its message the ERR_MSG, on whichever side it is created.
type Error struct {
	Code Code
	err  error
}

// Errorf returns an *Error with code and a message formatted as by
// fmt.Errorf (so %w wraps).
func Errorf(code Code, format string, a ...any) *Error {
	return &Error{Code: code, err: fmt.Errorf(format, a...)}
}

// Msg is the sentence sent as ERR_MSG.
func (e *Error) Msg() string { return e.err.Error() }

func (e *Error) Error() string { return e.err.Error() + " (" + e.Code.String() + ")" }

func (e *Error) Unwrap() error { return e.err }

// CodeOf returns the wire code of err: its own if err is or wraps an
// *Error, otherwise INTERNAL.
func CodeOf(err error) Code {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}
