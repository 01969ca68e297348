package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

func TestKube(t *testing.T) {
	k := kubetest.Start(t, kubetest.WithControllerManager())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kit"}}
	if _, err := k.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("reports its version", func(t *testing.T) {
		v, err := k.Clientset.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != kubetest.Version {
			t.Errorf("server version %q, want %q", v.GitVersion, kubetest.Version)
		}
	})

	t.Run("kubeconfig file authenticates", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "kit", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a user without roles is forbidden", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(k.User(t, "nobody"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().ConfigMaps("kit").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("list as a user without roles: %v, want forbidden", err)
		}
	})

	t.Run("garbage collector removes dependents", func(t *testing.T) {
		cms := k.Clientset.CoreV1().ConfigMaps("kit")
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}}}}
		if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			_, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("dependent still there (err %v)", err)
		})
	})

	t.Run("job controller creates pods", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "once"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
			}}},
		}
		if _, err := k.Clientset.BatchV1().Jobs("kit").Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			pods, err := k.Clientset.CoreV1().Pods("kit").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=once"})
			if err != nil {
				return err
			}
			if len(pods.Items) == 0 {
				return errors.New("no pod for the job yet")
			}
			return nil
		})
	})
}
