package process_test

import "google.golang.org/protobuf/testing/protocmp"

var cmpProto = protocmp.Transform()
