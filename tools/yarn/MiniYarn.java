// A mini YARN cluster on 127.0.0.1 for the spark-submit tests: a ResourceManager and NodeManagers in this JVM,
// without HDFS (fs.defaultFS stays file:///, so the staging directory is on the local disk every "host" shares).
//
//   java -cp '<libs>/*' MiniYarn.java <node managers> <memory MB per node manager> <yarn-site.xml to write>
//
// The configuration is written (to a temporary name, then renamed) only once every NodeManager has registered
// with the ResourceManager, with the ports the services actually bound: its appearance means "ready". The
// cluster runs until the JVM is killed. There is no clean shutdown on purpose: a NodeManager's takes 15 s and
// more (it waits for its log deletion service), so tests/spark/yarn.py kills the applications still running
// through the ResourceManager (which stops their containers), then the JVM.

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class MiniYarn {
    public static void main(String[] args) throws Exception {
        int nodeManagers = Integer.parseInt(args[0]);
        int memoryMb = Integer.parseInt(args[1]);
        File target = new File(args[2]);

        Configuration conf = new YarnConfiguration();
        conf.set("fs.defaultFS", "file:///");
        conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
        conf.set("yarn.nodemanager.hostname", "127.0.0.1");
        // Containers as small as Spark asks for (the default minimum rounds every one up to 1 GB).
        conf.setInt("yarn.scheduler.minimum-allocation-mb", 64);
        conf.setInt("yarn.scheduler.maximum-allocation-mb", memoryMb);
        conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", memoryMb);
        conf.setInt("yarn.nodemanager.resource.memory-mb", memoryMb);
        conf.setInt("yarn.nodemanager.resource.cpu-vcores", 4);
        // A full shared disk must not mark the NodeManagers unhealthy: they would get no containers.
        conf.setFloat("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", 100.0f);
        conf.setLong("yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb", 0);
        // Failed application attempts: once is enough in a test, a retry only hides the failure for longer.
        conf.setInt("yarn.resourcemanager.am.max-attempts", 1);
        conf.setBoolean("yarn.timeline-service.enabled", false);
        for (String setting : System.getProperty("miniyarn.conf", "").split(",")) {
            if (!setting.isEmpty()) {
                String[] pair = setting.split("=", 2);
                conf.set(pair[0], pair[1]);
            }
        }

        MiniYARNCluster cluster = new MiniYARNCluster("millstream", nodeManagers, 1, 1);
        cluster.init(conf);
        cluster.start();
        if (!cluster.waitForNodeManagersToConnect(120_000)) {
            throw new IllegalStateException(nodeManagers + " NodeManager(s) did not register within 120 s");
        }

        File staging = new File(target.getPath() + ".tmp");
        try (OutputStream out = new FileOutputStream(staging)) {
            cluster.getConfig().writeXml(out);
        }
        Files.move(staging.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE);
        System.out.println("MiniYarn ready: " + cluster.getConfig().get("yarn.resourcemanager.address"));
        Thread.currentThread().join();
    }
}
