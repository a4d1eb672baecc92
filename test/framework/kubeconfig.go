package framework

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig for kubectl and client-go at path.
//
// serverURL "" means the apiserver. An https server is trusted through
// CAFile; insecureHTTP says serverURL is plain http (listproxy on loopback),
// so no CA is set. user "" writes no credentials (listproxy in sidecar mode
// uses its own); otherwise the user's static token.
func (cp *ControlPlane) WriteKubeconfig(path, serverURL, user string, insecureHTTP bool) error {
	if serverURL == "" {
		serverURL = cp.APIServerURL
	}
	cluster := &clientcmdapi.Cluster{Server: serverURL}
	if !insecureHTTP {
		cluster.CertificateAuthority = cp.CAFile
	}
	authInfo := &clientcmdapi.AuthInfo{}
	name := "anonymous"
	if user != "" {
		authInfo.Token = cp.UserToken(user)
		name = user
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["listproxy-test"] = cluster
	config.AuthInfos[name] = authInfo
	config.Contexts["listproxy-test"] = &clientcmdapi.Context{Cluster: "listproxy-test", AuthInfo: name}
	config.CurrentContext = "listproxy-test"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
