//go:build !linux

package main

// ownTerminal does nothing outside Linux; see terminal_linux.go.
func ownTerminal() (restore func()) { return func() {} }
