// Package librarytest is the test harness shared by the tests of the
// template libraries (package library and its gateway library). It is a
// normal package imported only by tests.
//
// It offers:
//   - Watched, ParseObjects, NewIndex, ObjectID, RoundTrip and
//     CloneObjects: the watched_resources block of a library's README, the
//     objects of a multi-document YAML fixture, and an index of them built
//     as the renderer builds it (ids of a source named "test").
//   - Fixtures: the cases of a library's testdata (objects.yaml,
//     options.yaml, requests.yaml in the library's own request format,
//     golden/).
//   - Render, WriteBundle, HAProxyCheck and FileContent: a target compiled
//     and rendered over an index, its bundle laid out in a folder and
//     checked with the real `haproxy -c`.
//   - Golden: a fixture's bundle compared with its golden/ files, which
//     the caller's -update flag rewrites.
//   - RenderExample: an example of the repository rendered as `weft
//     render` would, its watched resources checked against the README.
//   - Incremental: a compiled target whose cache follows an index's
//     changes, rendered again on demand.
//   - Scene, WatchedOf, Ingress, Service and EndpointSlice: a target
//     rendered incrementally over objects a test changes as a cluster
//     would (Sync), for tests outside the library's folder too, such as
//     a deploy driver's test that runs the ingress library's bundle.
//   - StartEndpoints, StartHAProxy and Client: the traffic runner of the
//     routing tests: a fixture's EndpointSlices pointed at echo servers on
//     loopback addresses (answering with an Echo), a real HAProxy in the
//     foreground, and the HTTP client the requests are sent with.
//
// Every helper fails the test it is given on any error.
package librarytest
