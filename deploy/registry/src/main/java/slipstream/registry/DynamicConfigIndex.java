package slipstream.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * The list of runtime-editable ("dynamic") registry settings. Apicurio's own build generates it with
 * the apicurio-common-app-components-config-index-deployment extension, which Maven Central does not
 * serve; this registry has none (every setting comes from application.properties).
 */
@ApplicationScoped
public class DynamicConfigIndex {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
