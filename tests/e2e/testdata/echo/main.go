// Command echo is a static Go binary (no libc, so LD_PRELOAD cannot touch
// it) used as a peer of library-enabled programs:
//
//	echo serve PORT        echo every connection's bytes back
//	echo send HOST PORT N  send N random bytes, check they come back intact
//	echo repeat HOST PORT N COUNT  the same on COUNT connections, one after another
package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "serve":
		return serve(args[1])
	case len(args) == 4 && args[0] == "send":
		n, err := strconv.Atoi(args[3])
		if err != nil {
			return err
		}
		return send(net.JoinHostPort(args[1], args[2]), n)
	case len(args) == 5 && args[0] == "repeat":
		n, err := strconv.Atoi(args[3])
		if err != nil {
			return err
		}
		count, err := strconv.Atoi(args[4])
		if err != nil {
			return err
		}
		for range count {
			if err := send(net.JoinHostPort(args[1], args[2]), n); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("usage: echo serve PORT | echo send HOST PORT N | echo repeat HOST PORT N COUNT")
}

func serve(port string) error {
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

func send(addr string, n int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	data := make([]byte, n)
	rand.Read(data)
	go func() { c.Write(data); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("sent %d bytes, %d came back, not the same", n, len(got))
	}
	fmt.Println("OK", n)
	return nil
}
