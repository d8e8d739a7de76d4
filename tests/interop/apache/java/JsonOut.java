// The JSON-lines output the test programs (JClient, JSqlConsumer, JLitePull) share: one event
// per stdout line, and JSON string quoting. Compiled with them (install.compile_java takes the
// whole directory).
public final class JsonOut {
    private JsonOut() {}

    // One line, whole: listener threads print concurrently.
    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    // JSON string; non-ASCII as \\uXXXX so the bytes survive whatever stdout encoding is set.
    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
