// ACL 2.0 users and policies kept in memory, for the 5.x interop tests of ACL 2.0.
//
// A 5.x broker looks its users and ACLs up through two pluggable providers
// (authenticationMetadataProvider, authorizationMetadataProvider in broker.conf); the stock
// ones keep them in RocksDB. These keep them in maps, filled at start from the file the system
// property aiorocket.auth.file names, one entry a line:
//
//   user NAME PASSWORD Super|Normal
//   acl NAME Allow|Deny RESOURCE ACTION[,ACTION...]     e.g. acl ak Deny Topic:T Pub,Sub
//
// Everything else (request signatures, the policy decisions, the refusals) is the broker's own
// DefaultAuthenticationProvider and DefaultAuthorizationProvider. Compiled against 5.x only:
// 4.9.x has no ACL 2.0.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.*;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import org.apache.rocketmq.auth.authentication.enums.UserType;
import org.apache.rocketmq.auth.authentication.model.Subject;
import org.apache.rocketmq.auth.authentication.model.User;
import org.apache.rocketmq.auth.authentication.provider.AuthenticationMetadataProvider;
import org.apache.rocketmq.auth.authorization.enums.Decision;
import org.apache.rocketmq.auth.authorization.model.Acl;
import org.apache.rocketmq.auth.authorization.model.Resource;
import org.apache.rocketmq.auth.authorization.provider.AuthorizationMetadataProvider;
import org.apache.rocketmq.auth.config.AuthConfig;
import org.apache.rocketmq.common.action.Action;

public class AuthMemory {
    static final Map<String, User> USERS = new ConcurrentHashMap<>();
    static final Map<String, Acl> ACLS = new ConcurrentHashMap<>();
    static boolean loaded;

    static synchronized void load() {
        if (loaded) return;
        loaded = true;
        String file = System.getProperty("aiorocket.auth.file");
        if (file == null) return;
        try {
            for (String line : Files.readAllLines(Paths.get(file), StandardCharsets.UTF_8)) {
                String[] f = line.trim().split("\\s+");
                if (f[0].equals("user")) {
                    USERS.put(f[1], User.of(f[1], f[2], UserType.getByName(f[3])));
                } else if (f[0].equals("acl")) {
                    List<Action> actions = new ArrayList<>();
                    for (String a : f[4].split(",")) actions.add(Action.getByName(a));
                    Acl acl = Acl.of(User.of(f[1]), Collections.singletonList(Resource.of(f[3])),
                        actions, null, Decision.getByName(f[2]));
                    Acl old = ACLS.get(f[1]);
                    if (old == null) ACLS.put(f[1], acl);
                    else old.updatePolicy(acl.getPolicies());
                }
            }
        } catch (java.io.IOException e) {
            throw new IllegalStateException("cannot read " + file, e);
        }
    }

    public static class Users implements AuthenticationMetadataProvider {
        public void initialize(AuthConfig config, Supplier<?> metadataService) {
            load();
        }

        public void shutdown() {
        }

        public CompletableFuture<Void> createUser(User user) {
            USERS.put(user.getUsername(), user);
            return CompletableFuture.completedFuture(null);
        }

        public CompletableFuture<Void> deleteUser(String username) {
            USERS.remove(username);
            return CompletableFuture.completedFuture(null);
        }

        public CompletableFuture<Void> updateUser(User user) {
            return createUser(user);
        }

        public CompletableFuture<User> getUser(String username) {
            return CompletableFuture.completedFuture(USERS.get(username));
        }

        public CompletableFuture<List<User>> listUser(String filter) {
            return CompletableFuture.completedFuture(new ArrayList<>(USERS.values()));
        }
    }

    public static class Acls implements AuthorizationMetadataProvider {
        public void initialize(AuthConfig config, Supplier<?> metadataService) {
            load();
        }

        public void shutdown() {
        }

        public CompletableFuture<Void> createAcl(Acl acl) {
            ACLS.put(acl.getSubject().getSubjectKey().replaceFirst("^User:", ""), acl);
            return CompletableFuture.completedFuture(null);
        }

        public CompletableFuture<Void> deleteAcl(Subject subject) {
            ACLS.remove(subject.getSubjectKey().replaceFirst("^User:", ""));
            return CompletableFuture.completedFuture(null);
        }

        public CompletableFuture<Void> updateAcl(Acl acl) {
            return createAcl(acl);
        }

        public CompletableFuture<Acl> getAcl(Subject subject) {
            return CompletableFuture.completedFuture(
                ACLS.get(subject.getSubjectKey().replaceFirst("^User:", "")));
        }

        public CompletableFuture<List<Acl>> listAcl(String subjectFilter, String resourceFilter) {
            return CompletableFuture.completedFuture(new ArrayList<>(ACLS.values()));
        }
    }
}
