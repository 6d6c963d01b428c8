// sluice-franzgo: franz-go (kgo, kadm) test client for Sluice's integration tests
// (tests/integration/franz_go.py, client_errors.py). Every client is built with
// franz-go's defaults (idempotent producer, snappy batches, direct partition
// consumption without a group) except where a flag says otherwise.
//
//	sluice-franzgo roundtrip  -brokers B -topic T -partitions P -n N
//	sluice-franzgo produce-one -brokers B -topic T -size S
//	sluice-franzgo fetch-at   -brokers B -topic T -partition P -offset O -reset none|start|end
//	sluice-franzgo describe   -brokers B -topic T
//
// Output: one line per fact, "key value..." so the Python test can parse it;
// "ERROR <kerr name or Go error>" for errors a user would see.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	brokers    = flag.String("brokers", "127.0.0.1:9092", "seed brokers")
	topic      = flag.String("topic", "franz", "topic")
	partitions = flag.Int("partitions", 3, "partitions to create (roundtrip)")
	n          = flag.Int("n", 100000, "records to produce (roundtrip)")
	size       = flag.Int("size", 100, "value size (produce-one)")
	partition  = flag.Int("partition", 0, "partition (fetch-at)")
	offset     = flag.Int64("offset", 0, "offset (fetch-at)")
	reset      = flag.String("reset", "none", "none|start|end (fetch-at)")
	timeout    = flag.Duration("timeout", 60*time.Second, "overall time limit")
)

func die(format string, a ...any) {
	fmt.Printf("ERROR "+format+"\n", a...)
	os.Exit(1)
}

// errName names an error the way a user would look it up: the Kafka error code's
// name when franz-go maps it to one, else the Go error text.
func errName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return fmt.Sprintf("%s (code %d): %v", ke.Message, ke.Code, err)
	}
	return err.Error()
}

func newClient(opts ...kgo.Opt) *kgo.Client {
	all := append([]kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		die("new client: %v", err)
	}
	return cl
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sluice-franzgo roundtrip|produce-one|fetch-at|describe [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	flag.CommandLine.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch cmd {
	case "roundtrip":
		roundtrip(ctx)
	case "produce-one":
		produceOne(ctx)
	case "fetch-at":
		fetchAt(ctx)
	case "describe":
		describe(ctx)
	default:
		die("unknown command %s", cmd)
	}
}

func roundtrip(ctx context.Context) {
	cl := newClient()
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// kadm: create, list, alter a config (IncrementalAlterConfigs), describe configs.
	cr, err := adm.CreateTopics(ctx, int32(*partitions), 1, map[string]*string{"retention.ms": kadm.StringPtr("86400000")}, *topic)
	if err != nil {
		die("create topics: %s", errName(err))
	}
	for _, r := range cr.Sorted() {
		if r.Err != nil {
			die("create topic %s: %s", r.Topic, errName(r.Err))
		}
		fmt.Printf("created %s partitions %d\n", r.Topic, r.NumPartitions)
	}
	td, err := adm.ListTopics(ctx, *topic)
	if err != nil || td.Error() != nil {
		die("list topics: %v %v", err, td.Error())
	}
	fmt.Printf("listed %s partitions %d\n", *topic, len(td[*topic].Partitions))
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("172800000")}}, *topic)
	if err != nil {
		die("alter topic configs: %s", errName(err))
	}
	for _, r := range ar {
		if r.Err != nil {
			die("alter topic configs %s: %s", r.Name, errName(r.Err))
		}
	}
	// Kafka applies the change through its metadata log: describe until it shows
	// (a few seconds at most), then print what describe says.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rc, err := adm.DescribeTopicConfigs(ctx, *topic)
		if err != nil {
			die("describe topic configs: %s", errName(err))
		}
		val, src := "", ""
		for _, r := range rc {
			if r.Err != nil {
				die("describe topic configs %s: %s", r.Name, errName(r.Err))
			}
			for _, c := range r.Configs {
				if c.Key == "retention.ms" {
					val, src = c.MaybeValue(), c.Source.String()
				}
			}
		}
		if val == "172800000" || time.Now().After(deadline) {
			fmt.Printf("config retention.ms %s source %s\n", val, src)
			break
		}
	}

	// Produce with the client's defaults, asynchronously, then flush.
	t0 := time.Now()
	var failed, acked atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	for i := 0; i < *n; i++ {
		rec := &kgo.Record{Topic: *topic, Key: []byte(fmt.Sprintf("k-%09d", i)),
			Value: []byte(fmt.Sprintf("franz-go value %09d %s", i, strings.Repeat("x", i%64)))}
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
			} else {
				acked.Add(1)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		die("flush: %v", err)
	}
	if failed.Load() > 0 {
		die("produce: %d of %d records failed, first: %s", failed.Load(), *n, errName(firstErr))
	}
	fmt.Printf("produced %d in %.2fs\n", acked.Load(), time.Since(t0).Seconds())

	ends, err := adm.ListEndOffsets(ctx, *topic)
	if err != nil || ends.Error() != nil {
		die("list end offsets: %v %v", err, ends.Error())
	}
	var total int64
	var parts []string
	ends.Each(func(o kadm.ListedOffset) {
		total += o.Offset
		parts = append(parts, fmt.Sprintf("%d:%d", o.Partition, o.Offset))
	})
	sort.Strings(parts)
	fmt.Printf("end offsets %s total %d\n", strings.Join(parts, ","), total)

	// Consume everything with a second client: ConsumeTopics without a group is
	// direct partition consumption from the start (franz-go's default reset).
	cons := newClient(kgo.ConsumeTopics(*topic))
	defer cons.Close()
	seen := make([]byte, *n)
	next := map[int32]int64{}
	lastIdx := map[int32]int{}
	got, dups, bad := 0, 0, 0
	t1 := time.Now()
	for got < *n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			die("consume: timed out after %d of %d records", got, *n)
		}
		fs.EachError(func(t string, p int32, err error) {
			die("consume %s[%d]: %s", t, p, errName(err))
		})
		fs.EachRecord(func(r *kgo.Record) {
			k := string(r.Key)
			i, err := strconv.Atoi(strings.TrimPrefix(k, "k-"))
			if err != nil || i < 0 || i >= *n {
				bad++
				return
			}
			if r.Offset != next[r.Partition] {
				die("consume: partition %d offset %d, expected %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition] = r.Offset + 1
			if li, ok := lastIdx[r.Partition]; ok && i <= li {
				die("consume: partition %d index %d after %d (out of order)", r.Partition, i, li)
			}
			lastIdx[r.Partition] = i
			want := fmt.Sprintf("franz-go value %09d %s", i, strings.Repeat("x", i%64))
			if string(r.Value) != want {
				bad++
			}
			if seen[i] != 0 {
				dups++
			}
			seen[i] = 1
			got++
		})
	}
	missing := 0
	for _, s := range seen {
		if s == 0 {
			missing++
		}
	}
	fmt.Printf("consumed %d in %.2fs partitions %d missing %d duplicated %d bad %d\n",
		got, time.Since(t1).Seconds(), len(next), missing, dups, bad)
}

func produceOne(ctx context.Context) {
	cl := newClient()
	defer cl.Close()
	v := make([]byte, *size)
	rand.Read(v) // incompressible: franz-go compresses batches with snappy by default
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: *topic, Key: []byte("k"), Value: v}).First()
	if err != nil {
		die("%s", errName(err))
	}
	fmt.Printf("OK partition %d offset %d\n", r.Partition, r.Offset)
}

func fetchAt(ctx context.Context) {
	opts := []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		*topic: {int32(*partition): kgo.NewOffset().At(*offset)}})}
	switch *reset {
	case "none":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	case "start":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	case "end":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	default:
		die("bad -reset %s", *reset)
	}
	cl := newClient(opts...)
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			die("timed out: no record and no error")
		}
		fs.EachError(func(t string, p int32, err error) {
			die("%s", errName(err))
		})
		if recs := fs.Records(); len(recs) > 0 {
			fmt.Printf("OK first offset %d value %q\n", recs[0].Offset, recs[0].Value)
			return
		}
	}
}

func describe(ctx context.Context) {
	cl := newClient()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, *topic)
	if err != nil {
		die("%s", errName(err))
	}
	if err := td.Error(); err != nil {
		die("%s", errName(err))
	}
	fmt.Printf("OK partitions %d\n", len(td[*topic].Partitions))
}
