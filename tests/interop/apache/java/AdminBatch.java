// Several mqadmin commands in one JVM: the real MQAdminStartup.main0 of the install's tools, run
// once per command, so a test pays one JVM start-up instead of one per command.
//
//   AdminBatch TOOLS_HOME NAMESRV CMD ARGS... [-- CMD ARGS...]...
//
// Before each command it prints "@@@ CMD ARGS" on a line of its own, after it "@@@ end": the
// test splits the output there. "-n NAMESRV" is appended to every command. Errors the tools
// print (stack traces on System.err) go to stdout too, inside their command's section.
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class AdminBatch {
    public static void main(String[] args) {
        // 4.9.x MQAdminStartup reads its logback configuration from rocketmq.home.dir (the
        // harness's tools home, TOOLS_HOME/conf/logback_tools.xml), once, when the class loads.
        System.setProperty("rocketmq.home.dir", args[0]);
        System.setErr(System.out);
        String namesrv = args[1];
        List<String> cur = new ArrayList<>();
        for (int i = 2; i <= args.length; i++) {
            if (i < args.length && !args[i].equals("--")) {
                cur.add(args[i]);
                continue;
            }
            if (cur.isEmpty()) continue;
            cur.add("-n");
            cur.add(namesrv);
            System.out.println();
            System.out.println("@@@ " + String.join(" ", cur));
            System.out.flush();
            try {
                MQAdminStartup.main0(cur.toArray(new String[0]), null);
            } catch (Throwable t) {
                t.printStackTrace(System.out);
            }
            System.out.println();
            System.out.println("@@@ end");
            System.out.flush();
            cur.clear();
        }
        System.exit(0);  // the admin clients' threads would keep the JVM alive
    }
}
