/*
 * One JVM serving many commands to Kafka's own Java client (kafka-clients), for tests/server/test_java_*.py
 * through tests/server/java/driver.py:
 *
 *   java -cp CLASSES:JARS Driver
 *
 * stdin carries one JSON command per line: {"op": ..., ...}. stdout answers each with one JSON line:
 * {"ok": <result>} or {"error": <simple class name of the exception>, "message": ...} (the cause of an
 * ExecutionException: what the client's future failed with). The client's own log goes to stderr.
 *
 * Clients are named and kept between commands: {"op": "admin" | "producer" | "consumer", "name": n, "config":
 * {...}} makes one (String keys and values), {"op": "close", "name": n} closes it. Producer, consumer and group
 * operations live in Clients.java, the Admin API's in AdminOps.java and AdminGroupOps.java.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;

public final class Driver {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Clients clients = new Clients();
        AdminOps admin = new AdminOps(clients);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> answer = new LinkedHashMap<>();
            try {
                @SuppressWarnings("unchecked")
                Map<String, Object> cmd = (Map<String, Object>) Json.parse(line);
                String op = (String) cmd.get("op");
                if ("exit".equals(op)) break;
                Object result = clients.handles(op) ? clients.run(op, cmd) : admin.run(op, cmd);
                answer.put("ok", result);
            } catch (Throwable t) {
                t.printStackTrace();                 // the whole trace to stderr (the driver's log)
                Throwable cause = t;
                while ((cause instanceof ExecutionException || cause instanceof java.util.concurrent.CompletionException)
                        && cause.getCause() != null) {
                    cause = cause.getCause();
                }
                answer.put("error", cause.getClass().getSimpleName());
                StringBuilder message = new StringBuilder(String.valueOf(cause.getMessage()));
                for (Throwable c = cause.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                    message.append(" (caused by ").append(c.getClass().getSimpleName()).append(": ")
                            .append(c.getMessage()).append(')');
                }
                answer.put("message", message.toString());
            }
            out.println(Json.write(answer));
        }
        clients.closeAll();
    }
}
