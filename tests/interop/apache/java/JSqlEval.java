// Evaluates SQL92 selectors with Apache RocketMQ 4.9.8's own filter module, the way its broker
// does (ExpressionMessageFilter): for the tests of aiorocket's SQL92 filter
// (tests/interop/apache/test_java_sql92.py).
//
//   JSqlEval < cases
//
// Reads one JSON object per line, {"e": EXPRESSION, "p": {NAME: VALUE, ...}}, and prints one
// line per case: "P" when the expression does not compile, otherwise "T" (the broker delivers
// the message), "F" (false), "N" (null, unknown) or "X" (the evaluation threw; the broker logs
// it and does not deliver).
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.expression.Expression;

public class JSqlEval {
    public static void main(String[] a) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            JSONObject o = JSON.parseObject(line);
            String expr = o.getString("e");
            final Map<String, Object> props = new HashMap<>();
            JSONObject p = o.getJSONObject("p");
            if (p != null) for (String k : p.keySet()) props.put(k, p.getString(k));
            Expression compiled;
            try {
                compiled = FilterFactory.INSTANCE.get("SQL92").compile(expr);
            } catch (Throwable t) {
                out.println("P");
                continue;
            }
            EvaluationContext ctx = new EvaluationContext() {
                public Object get(String name) { return props.get(name); }
                public Map<String, Object> keyValues() { return props; }
            };
            String r;
            try {
                Object v = compiled.evaluate(ctx);
                r = v == null ? "N" : v == Boolean.TRUE ? "T" : v instanceof Boolean ? "F" : "F";
            } catch (Throwable t) {
                r = "X";
            }
            out.println(r);
        }
        out.flush();
    }
}
