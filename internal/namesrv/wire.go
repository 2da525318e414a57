package namesrv

// JSON bodies exchanged with clients and brokers. Struct fields are in
// alphabetical order, so encoding/json's output (declaration order for
// fields, sorted keys for maps, no whitespace) matches what Java's
// fastjson emits.

// Permission bits of a topic (QueueData.perm, TopicConfig.Perm).
const (
	PermInherit  = 0x1
	PermWrite    = 0x2
	PermRead     = 0x4
	PermPriority = 0x8
	// PermReadWrite is the usual value (6).
	PermReadWrite = PermRead | PermWrite
)

// TopicConfig is one topic as a broker registers it.
type TopicConfig struct {
	TopicName      string
	ReadQueueNums  int
	WriteQueueNums int
	Perm           int
	TopicSysFlag   int
	Order          bool
}

// wireTopicConfig is Java's TopicConfig JSON.
type wireTopicConfig struct {
	Attributes      map[string]string `json:"attributes"`
	Order           bool              `json:"order"`
	Perm            int               `json:"perm"`
	ReadQueueNums   int               `json:"readQueueNums"`
	TopicFilterType string            `json:"topicFilterType"`
	TopicName       string            `json:"topicName"`
	TopicSysFlag    int               `json:"topicSysFlag"`
	WriteQueueNums  int               `json:"writeQueueNums"`
}

type dataVersion struct {
	Counter      int64 `json:"counter"`
	StateVersion int64 `json:"stateVersion"`
	Timestamp    int64 `json:"timestamp"`
}

type topicConfigWrapper struct {
	DataVersion      dataVersion                `json:"dataVersion"`
	TopicConfigTable map[string]wireTopicConfig `json:"topicConfigTable"`
}

// registerBody is Java's non-compressed RegisterBrokerBody.
type registerBody struct {
	FilterServerList            []string           `json:"filterServerList"`
	TopicConfigSerializeWrapper topicConfigWrapper `json:"topicConfigSerializeWrapper"`
}

// queueData is one broker name's queues of a topic.
type queueData struct {
	BrokerName     string `json:"brokerName"`
	Perm           int    `json:"perm"`
	ReadQueueNums  int    `json:"readQueueNums"`
	TopicSysFlag   int    `json:"topicSysFlag"`
	WriteQueueNums int    `json:"writeQueueNums"`
}

// brokerData lists the addresses of one broker name by brokerId. The map
// keys are decimal brokerIds, so they are quoted in JSON.
type brokerData struct {
	BrokerAddrs        map[string]string `json:"brokerAddrs"`
	BrokerName         string            `json:"brokerName"`
	Cluster            string            `json:"cluster"`
	EnableActingMaster bool              `json:"enableActingMaster"`
}

// topicRouteData is the GET_ROUTEINFO_BY_TOPIC body.
type topicRouteData struct {
	BrokerDatas       []brokerData        `json:"brokerDatas"`
	FilterServerTable map[string][]string `json:"filterServerTable"`
	QueueDatas        []queueData         `json:"queueDatas"`
}

// clusterInfo is the GET_BROKER_CLUSTER_INFO body.
type clusterInfo struct {
	BrokerAddrTable  map[string]brokerData `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string   `json:"clusterAddrTable"`
}

// topicList is the GET_ALL_TOPIC_LIST_FROM_NAMESERVER body.
type topicList struct {
	TopicList []string `json:"topicList"`
}
