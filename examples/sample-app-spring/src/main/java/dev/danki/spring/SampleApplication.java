package dev.danki.spring;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.support.GenericApplicationContext;

/**
 * The Spring Boot sample app: the lab's sample-app contract (flags, else
 * environment variables: VERSION, BIND_ADDRESS, PORT, SLOW_MS, SLOW_PERCENT;
 * /healthz, X-Version, the X-Danki-Warmup marker on POST /orders) on a
 * typical Spring service: Tomcat, Jackson, Bean Validation, Actuator.
 *
 * <p>Arguments other than this app's flags go to Spring as they are
 * ({@code --server.port=0}, {@code --logging.level.root=DEBUG}).
 */
@SpringBootApplication
public class SampleApplication {

    public static void main(String[] args) {
        List<String> spring = new ArrayList<>();
        Settings s = Settings.parse(args, spring);
        SpringApplication app = new SpringApplication(SampleApplication.class);
        // Defaults, not overrides: a --server.port=N argument or SERVER_PORT
        // still wins, as in any Spring Boot service.
        app.setDefaultProperties(Map.of(
                "server.address", s.bind(),
                "server.port", Integer.toString(s.port())));
        app.addInitializers(ctx -> ((GenericApplicationContext) ctx).registerBean(Settings.class, () -> s));
        app.run(spring.toArray(String[]::new));
        System.err.printf("sample-app-spring %s listening on %s:%d (slow-ms=%d, slow-percent=%d)%n",
                s.version(), s.bind(), s.port(), s.slowMs(), s.slowPercent());
    }
}
