package testkit

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ZooKeeperJar is where Debian's zookeeper package (zookeeperd brings it)
// puts the server; its manifest names the libraries it needs.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeper is a standalone ZooKeeper server on 127.0.0.1, run with java
// from Debian's package, with its data in a test folder: a restart keeps
// the data.
type ZooKeeper struct {
	*Server
	// Addr is the client port's host:port.
	Addr string
}

// StartZooKeeper starts a ZooKeeper server and waits until it serves. It
// needs java and ZooKeeperJar (`make deps` installs zookeeperd).
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	java := Program(t, "java (apt-get install zookeeperd)", "java", "/usr/bin/java")
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		Need(t, "ZooKeeper (apt-get install zookeeperd)", err)
	}
	dir := t.TempDir()
	port := FreePort(t)
	cfg := filepath.Join(dir, "zoo.cfg")
	conf := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"maxSessionTimeout=60000\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n", filepath.Join(dir, "data"), port)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	z := &ZooKeeper{Addr: "127.0.0.1:" + strconv.Itoa(port)}
	z.Server = NewServer(t, "zookeeper", z.ruok, java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false", "-cp", ZooKeeperJar,
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
	z.Start()
	return z
}

// ruok answers nil when the server says it is fine.
func (z *ZooKeeper) ruok() error {
	c, err := net.DialTimeout("tcp", z.Addr, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if line != "imok" {
		return fmt.Errorf("ruok: %q, %v", line, err)
	}
	return nil
}
